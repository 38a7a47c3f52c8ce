//! `nasd`: the command line. Thin: parses flags, calls the drive, client and lab libraries,
//! prints. Errors go to stderr with what failed, and the exit status is non-zero.
//!
//! # Layout
//! - [`cmd_drive`]: `nasd drive init|run|info`, `nasd partition ...`, `nasd key rotate`.
//! - [`cmd_obj`]: `nasd obj ...` and `nasd cap mint`.
//! - [`bench`]: `nasd bench drive`; [`bench_ec`]: `nasd bench ec`.
//! - [`bench_cluster`]: `nasd bench cluster` (layouts, concurrent clients, degraded reads).
//! - [`cmd_lab`]: `nasd lab ...` (the seeds' experiments).
//! - [`cmd_manager`]: `nasd manager init|run|drive-add|drives`.
//! - [`cmd_up`]: `nasd up|down`: a local cluster of processes ([`nasd_cluster`]).
//! - [`cmd_fs`]: `nasd ls|cat|stat|mkdir|rm|mv|chmod|chown|truncate|touch|user|group|login|logout`.
//! - [`cmd_cp`]: `nasd cp` (modes, times, holes, destinations).
//! - [`cmd_quota`]: `nasd quota set|show` (per-user quotas, seed 002 §3.2).
//! - [`demo`]: `nasd demo`.
//! - [`metrics`]: `--metrics ADDR` of the commands that serve.
//! - [`parse`]: flag value parsers (durations, protections, sizes).

/// `print!` to stdout that ends the process quietly when stdout is a closed pipe
/// (`nasd obj getattr ... | head -2`) instead of panicking, and with an error otherwise.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout(), $($arg)*) {
            $crate::stdout_failed(e);
        }
    }};
}

/// `println!` with [`out!`]'s handling of a closed stdout.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            $crate::stdout_failed(e);
        }
    }};
}

/// A failed write to stdout: a closed pipe ends the process with success (the reader has
/// what it wanted), anything else is an error.
fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("nasd: writing to stdout: {e}");
    std::process::exit(1);
}

mod bench;
mod bench_cluster;
mod bench_degraded;
mod bench_ec;
mod bench_login;
mod bench_meta;
mod bench_mount;
mod bench_mount_work;
mod bench_s3;
mod cmd_cp;
mod cmd_drive;
mod cmd_fs;
mod cmd_heal;
mod cmd_keys;
mod cmd_lab;
mod cmd_manager;
mod cmd_obj;
mod cmd_quota;
mod cmd_s3;
mod cmd_up;
mod demo;
mod metrics;
mod parse;

use clap::{Parser, Subcommand};

/// Secure network-attached storage in the line of CMU's NASD.
#[derive(Parser, Debug)]
#[command(name = "nasd", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Create and run a drive; ask it what it is.
    #[command(subcommand)]
    Drive(cmd_drive::DriveCmd),
    /// Object operations against a drive (seed 002 Table 1).
    #[command(subcommand)]
    Obj(cmd_obj::ObjCmd),
    /// Capabilities: mint one from a working key file.
    #[command(subcommand)]
    Cap(cmd_obj::CapCmd),
    /// Partition operations (seed 002 Table 2), authorized by the drive key.
    #[command(subcommand)]
    Partition(cmd_drive::PartitionCmd),
    /// Key management (seed 002 Table 6).
    #[command(subcommand)]
    Key(cmd_drive::KeyCmd),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// The seeds' experiments rerun on nasd's code.
    Lab(cmd_lab::LabArgs),
    /// The file manager: init, run, register drives.
    #[command(subcommand)]
    Manager(cmd_manager::ManagerCmd),
    /// Start a local cluster (manager + N drives, each its own process).
    Up {
        /// The cluster's directory (default: $NASD_DATA, else the current cluster, else
        /// ~/.local/share/nasd). `up` makes it the current cluster for later commands.
        #[arg(long, value_name = "DIR")]
        data: Option<std::path::PathBuf>,
        /// Drives of a new cluster (default 2); a striped layout needs one per component,
        /// e.g. 6 for rs:4+2. An existing cluster keeps its drives.
        #[arg(long, value_name = "N")]
        drives: Option<usize>,
        /// Bytes each drive may hold, set when the cluster is first created (default: the
        /// file system's free space).
        #[arg(long, value_name = "BYTES")]
        drive_capacity: Option<u64>,
        /// Return once the cluster is up; stop it with `nasd down`.
        #[arg(long)]
        background: bool,
        /// Also serve S3 on ADDR (buckets under nasd:/s3; a gateway user of the cluster's
        /// own acts for the users whose keys sign requests).
        #[arg(long, value_name = "ADDR")]
        s3: Option<String>,
        /// A KMS key id the gateway serves SSE-KMS under, as a name of nasd's own encryption
        /// (repeatable; docs/s3.md "Server-side encryption").
        #[arg(long = "s3-kms-key-id", value_name = "ID", requires = "s3")]
        s3_kms_key_ids: Vec<String>,
        /// The gateway also serves requests signed with SigV2 (`nasd s3 serve --sigv2`).
        #[arg(long = "s3-sigv2", requires = "s3")]
        s3_sigv2: bool,
        /// The gateway removes multipart uploads unchanged this long (`nasd s3 serve
        /// --stale-upload-secs`; default a week).
        #[arg(long = "s3-stale-upload-secs", value_name = "SECS", requires = "s3")]
        s3_stale_upload_secs: Option<u64>,
        /// The gateway counts lifecycle rules' days as this many seconds (`nasd s3 serve
        /// --lifecycle-day-secs`; for tests).
        #[arg(long = "s3-lifecycle-day-secs", value_name = "SECS", requires = "s3")]
        s3_lifecycle_day_secs: Option<u64>,
        /// The region the gateway serves (`nasd s3 serve --region`; default us-east-1).
        #[arg(long = "s3-region", value_name = "NAME", requires = "s3")]
        s3_region: Option<String>,
        /// Where a new cluster's manager keeps its metadata: `sqlite` (the default),
        /// `postgres` (a private PostgreSQL server in DIR/postgres, from the system's
        /// binaries, stopped by `nasd down`), or a PostgreSQL connection string.
        #[arg(long, value_name = "STORE")]
        meta: Option<String>,
        /// Managers of a new cluster (default 1). More than one need `--meta postgres` (or a
        /// connection string): they take turns leading its database, one serving while the
        /// others stand by, and clients move to the next when it dies.
        #[arg(long, value_name = "N")]
        managers: Option<usize>,
    },
    /// Stop a cluster started with `nasd up --background`.
    Down {
        /// The cluster's directory (default: $NASD_DATA, else the current cluster, else
        /// ~/.local/share/nasd).
        #[arg(long, value_name = "DIR")]
        data: Option<std::path::PathBuf>,
    },
    /// A self-contained tour: cluster, copy, verify, revocation, tamper detection, throughput.
    Demo,
    /// Copy files in, out, or within the cluster (remote paths are nasd:/path).
    Cp(cmd_cp::CpArgs),
    /// List a directory.
    Ls(cmd_fs::LsArgs),
    /// Print files.
    Cat {
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Show a file's or directory's attributes.
    Stat {
        #[arg(required = true)]
        paths: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Make directories.
    Mkdir {
        #[arg(required = true)]
        paths: Vec<String>,
        #[arg(short = 'p')]
        parents: bool,
        #[arg(long, default_value = "755")]
        mode: String,
        /// The layout new files in the new directories get (see `nasd layout set`).
        #[arg(long, value_name = "LAYOUT")]
        layout: Option<String>,
    },
    /// The layout (stripe map) new files under a directory get.
    #[command(subcommand)]
    Layout(cmd_heal::LayoutCmd),
    /// Check every shard of the files at or under PATH (default: all) against its drive's
    /// integrity data and its code; with --repair, rewrite what is damaged and rebuild stale
    /// components. Admins only.
    Scrub {
        path: Option<String>,
        #[arg(long)]
        repair: bool,
        #[arg(long)]
        json: bool,
    },
    /// The cluster's health: drives, degraded files, drive replacement, background scrub,
    /// from counts the manager keeps as files change. Admins only.
    Status {
        #[arg(long)]
        json: bool,
        /// Also count by walking every file (slow on a large namespace) and say whether the
        /// kept counts agree; the manager keeps the walked ones from then on.
        #[arg(long)]
        recount: bool,
    },
    /// Remove files (and with -r directories).
    Rm {
        #[arg(required = true)]
        paths: Vec<String>,
        #[arg(short = 'r')]
        recursive: bool,
    },
    /// Rename or move.
    Mv { from: String, to: String },
    /// Mount a cluster directory (default nasd:/) at MOUNTPOINT and serve it until it is
    /// unmounted (`nasd umount`, or ctrl-c): a nasd client, reading from and writing to the
    /// drives directly; files written and closed here are seen by every other client.
    Mount {
        /// nasd:/PATH then MOUNTPOINT, or MOUNTPOINT alone.
        #[arg(required = true, num_args = 1..=2)]
        paths: Vec<String>,
        /// Serve every local user (root only): each uid acts as its own nasd user, with the
        /// login it saved (`nasd login`) or the one `--users` gives; a uid with neither is
        /// refused. Without it the mount serves its mounter alone.
        #[arg(long)]
        allow_other: bool,
        /// With --allow-other: a file mapping local ids to nasd names, one per line:
        /// `user UID NAME [KEY_FILE]` or `group GID NAME` (docs/mount.md).
        #[arg(long, value_name = "FILE", requires = "allow_other")]
        users: Option<std::path::PathBuf>,
        #[command(flatten)]
        metrics: metrics::MetricsArgs,
    },
    /// Unmount a `nasd mount`.
    Umount { mountpoint: String },
    /// The S3 gateway.
    #[command(subcommand)]
    S3(cmd_s3::S3Cmd),
    /// Make a hard link LINK to the file TARGET (both nasd:/paths), or with -s a symbolic
    /// link LINK holding TARGET as given (it need not exist; relative targets resolve from
    /// LINK's directory).
    Ln {
        #[arg(short = 's')]
        symbolic: bool,
        target: String,
        link: String,
    },
    /// Change a mode (octal); revokes outstanding capabilities.
    Chmod {
        mode: String,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Change owner and/or group (OWNER, OWNER:GROUP or :GROUP); revokes capabilities.
    Chown {
        spec: String,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Let a user or group decrypt an encrypted file too: its keys are wrapped for them
    /// (seed 001 §3.3.1). Reading it still takes the file's mode at the manager.
    Share {
        path: String,
        #[arg(long = "user", value_name = "USER")]
        users: Vec<String>,
        #[arg(long = "group", value_name = "GROUP")]
        groups: Vec<String>,
        /// Also let the group write (the file's mode gets g+w); a user writes as owner or
        /// through a group.
        #[arg(long)]
        write: bool,
    },
    /// Stop a user or group from decrypting what is written to an encrypted file from now
    /// on: their wraps go and later writes use a fresh key (blocks already written keep
    /// theirs until rewritten: `nasd rekey` re-encrypts them now).
    Unshare {
        path: String,
        #[arg(long = "user", value_name = "USER")]
        users: Vec<String>,
        #[arg(long = "group", value_name = "GROUP")]
        groups: Vec<String>,
    },
    /// Re-encrypt encrypted files under a fresh key now.
    Rekey {
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Set a file's size: cut it short or extend it with zeros.
    Truncate {
        path: String,
        /// New size in bytes (suffixes k, M, G accepted).
        #[arg(value_parser = parse::bytes)]
        size: u64,
    },
    /// Set modify times to now (or --mtime); creates missing files, like touch(1).
    #[command(visible_alias = "utimes")]
    Touch {
        #[arg(required = true)]
        paths: Vec<String>,
        /// Modify time in seconds since the Unix epoch (fractions allowed).
        #[arg(long, value_name = "SECONDS")]
        mtime: Option<f64>,
        /// Do not create missing files.
        #[arg(short = 'c', long)]
        no_create: bool,
    },
    /// Users (admin).
    #[command(subcommand)]
    User(cmd_fs::UserCmd),
    /// Groups: adding them and their members (admins); their keys (members).
    #[command(subcommand)]
    Group(cmd_fs::GroupCmd),
    /// Per-user quotas on the bytes of files a user owns.
    #[command(subcommand)]
    Quota(cmd_quota::QuotaCmd),
    /// Log in and keep a session token for later commands. The session lasts the manager's
    /// session_ttl_ms (12 h by default), until `nasd logout`, or until the password or key of
    /// the user changes.
    Login {
        #[arg(long)]
        user: Option<String>,
        /// Log in with this Ed25519 secret key file instead of a password.
        #[arg(long, value_name = "FILE")]
        key: Option<std::path::PathBuf>,
        /// For an account made before manager protocol 15: show the manager the password one
        /// last time, so it checks it against its old hash, then move the account to OPAQUE
        /// (the hash is deleted and the password never travels again).
        #[arg(long, conflicts_with = "key")]
        legacy_password: bool,
    },
    /// End the session `nasd login` saved (on the manager too) and delete its token file.
    Logout {
        #[arg(long)]
        user: Option<String>,
    },
}

/// Sends a long-running process's log lines to standard error (its log file under `nasd
/// up`): `RUST_LOG` when set, else `default`. Colours only on a terminal.
pub(crate) fn log_to_stderr(default: &str) {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .init();
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Completes at the first ctrl-c or SIGTERM (an operator's stop).
pub(crate) async fn terminated() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Unmounts `mountpoint` at the first ctrl-c or SIGTERM, so a FUSE server stopped by a
/// signal never leaves a dead mount point behind.
pub(crate) fn unmount_on_signal(rt: &tokio::runtime::Runtime, mountpoint: std::path::PathBuf) {
    rt.spawn(async move {
        terminated().await;
        if let Err(e) = nasd_fuse::unmount(&mountpoint) {
            eprintln!("nasd: unmounting {}: {e}", mountpoint.display());
        }
    });
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Drive(c) => cmd_drive::run_drive(c),
        Cmd::Obj(c) => runtime()?.block_on(cmd_obj::run_obj(c)),
        Cmd::Cap(c) => cmd_obj::run_cap(c),
        Cmd::Partition(c) => runtime()?.block_on(cmd_drive::run_partition(c)),
        Cmd::Key(c) => runtime()?.block_on(cmd_drive::run_key(c)),
        Cmd::Bench(c) => bench::run(c),
        Cmd::Lab(a) => cmd_lab::run(a),
        Cmd::Manager(c) => cmd_manager::run(c),
        Cmd::Up {
            data,
            drives,
            drive_capacity,
            background,
            s3,
            s3_kms_key_ids,
            s3_sigv2,
            s3_stale_upload_secs,
            s3_lifecycle_day_secs,
            s3_region,
            meta,
            managers,
        } => cmd_up::up(
            data,
            drives,
            s3.map(|addr| cmd_s3::Up {
                listen: addr,
                kms_key_ids: s3_kms_key_ids,
                sigv2: s3_sigv2,
                stale_upload_secs: s3_stale_upload_secs,
                lifecycle_day_secs: s3_lifecycle_day_secs,
                region: s3_region,
            }),
            nasd_cluster::Options {
                drive_capacity_bytes: drive_capacity,
                background,
                meta: meta
                    .as_deref()
                    .map(nasd_cluster::postgres::Meta::parse)
                    .transpose()?
                    .unwrap_or_default(),
                managers: managers.unwrap_or(1),
                ..nasd_cluster::Options::drives(drives.unwrap_or(cmd_up::DRIVES_DEFAULT))
            },
        ),
        Cmd::Down { data } => cmd_up::down(data),
        Cmd::Demo => demo::run(),
        Cmd::Cp(a) => runtime()?.block_on(cmd_cp::cp(a)),
        Cmd::Ls(a) => runtime()?.block_on(cmd_fs::ls(a)),
        Cmd::Cat { paths } => runtime()?.block_on(cmd_fs::cat(paths)),
        Cmd::Stat { paths, json } => runtime()?.block_on(cmd_fs::stat(paths, json)),
        Cmd::Mkdir {
            paths,
            parents,
            mode,
            layout,
        } => runtime()?.block_on(async move {
            cmd_fs::mkdir(paths.clone(), parents, &mode).await?;
            match layout {
                Some(l) => cmd_heal::set_layouts(&paths, &l).await,
                None => Ok(()),
            }
        }),
        Cmd::Layout(c) => runtime()?.block_on(cmd_heal::layout(c)),
        Cmd::Scrub { path, repair, json } => {
            runtime()?.block_on(cmd_heal::scrub(path, repair, json))
        }
        Cmd::Status { json, recount } => runtime()?.block_on(cmd_heal::status(json, recount)),
        Cmd::Rm { paths, recursive } => runtime()?.block_on(cmd_fs::rm(paths, recursive)),
        Cmd::Mv { from, to } => runtime()?.block_on(cmd_fs::mv(from, to)),
        Cmd::Mount {
            paths,
            allow_other,
            users,
            metrics,
        } => cmd_fs::mount(paths, allow_other, users, metrics),
        Cmd::S3(c) => cmd_s3::run(c),
        Cmd::Umount { mountpoint } => anyhow::Context::with_context(
            nasd_fuse::unmount(std::path::Path::new(&mountpoint)),
            || format!("unmounting {mountpoint}"),
        ),
        Cmd::Ln {
            symbolic,
            target,
            link,
        } => runtime()?.block_on(cmd_fs::ln(symbolic, target, link)),
        Cmd::Chmod { mode, paths } => runtime()?.block_on(cmd_fs::chmod(mode, paths)),
        Cmd::Chown { spec, paths } => runtime()?.block_on(cmd_fs::chown(spec, paths)),
        Cmd::Truncate { path, size } => runtime()?.block_on(cmd_fs::truncate(path, size)),
        Cmd::Share {
            path,
            users,
            groups,
            write,
        } => runtime()?.block_on(cmd_fs::share(path, users, groups, write, true)),
        Cmd::Unshare {
            path,
            users,
            groups,
        } => runtime()?.block_on(cmd_fs::share(path, users, groups, false, false)),
        Cmd::Rekey { paths } => runtime()?.block_on(cmd_fs::rekey(paths)),
        Cmd::Touch {
            paths,
            mtime,
            no_create,
        } => runtime()?.block_on(cmd_fs::touch(paths, mtime, no_create)),
        Cmd::User(c) => runtime()?.block_on(cmd_fs::user(c)),
        Cmd::Group(c) => runtime()?.block_on(cmd_fs::group(c)),
        Cmd::Quota(c) => runtime()?.block_on(cmd_quota::run(c)),
        Cmd::Login {
            user,
            key,
            legacy_password,
        } => runtime()?.block_on(cmd_fs::login(user, key, legacy_password)),
        Cmd::Logout { user } => runtime()?.block_on(cmd_fs::logout(user)),
    }
}

/// Freed blocks below this size stay in the heap rather than going back to the kernel at once
/// (glibc's `M_MMAP_THRESHOLD`, here its maximum): every frame, up to `FRAME_BYTES_MAX`.
const MALLOC_MMAP_THRESHOLD_BYTES: usize = 32 << 20;
/// Free memory at the top of a heap is given back to the kernel only past this much
/// (glibc's `M_TRIM_THRESHOLD`, twice the mmap threshold, as glibc's own adaptive rule sets it).
const MALLOC_TRIM_THRESHOLD_BYTES: usize = 2 * MALLOC_MMAP_THRESHOLD_BYTES;
const _: () = assert!(nasd_proto::FRAME_BYTES_MAX <= MALLOC_MMAP_THRESHOLD_BYTES);

/// Keeps the memory of freed reply and read buffers for the next one. Under glibc's adaptive
/// defaults a process that allocates and frees a few 1 MiB buffers per request (a client's
/// read replies, a drive's read data) keeps handing the pages back to the kernel and taking
/// them again: 256 page faults and the kernel's zeroing of every page per MiB, which cost the
/// client more per verified 1 MiB read than verifying it (docs/performance.md, "Verified
/// reads at 1 MiB").
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets malloc parameters; it runs first thing in `main`, before any
    // other thread exists.
    unsafe {
        libc::mallopt(
            libc::M_MMAP_THRESHOLD,
            MALLOC_MMAP_THRESHOLD_BYTES as libc::c_int,
        );
        libc::mallopt(
            libc::M_TRIM_THRESHOLD,
            MALLOC_TRIM_THRESHOLD_BYTES as libc::c_int,
        );
    }
}

fn main() {
    keep_freed_memory();
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("nasd: {e:#}");
        std::process::exit(1);
    }
}
