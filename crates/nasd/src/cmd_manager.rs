//! `nasd manager init|run|drive-add|drives`: the file manager's commands.

use anyhow::Context as _;
use clap::Subcommand;
use nasd_manager::service::Policy;
use nasd_manager::setup;
use nasd_proto::manager::calls;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum ManagerCmd {
    /// Create a manager in DIR: metadata store, admin user, cluster CA and certificate.
    Init {
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        #[arg(long, default_value = "127.0.0.1:7700")]
        listen: String,
        #[arg(long, default_value = "admin")]
        admin: String,
        /// File holding the admin's password (default: $NASD_NEW_PASSWORD, else read stdin).
        #[arg(long, value_name = "FILE")]
        admin_password_file: Option<PathBuf>,
        /// Extra DNS name or address for the manager's certificate (repeatable).
        #[arg(long = "name")]
        names: Vec<String>,
        /// Where the metadata lives: `sqlite` (meta.sqlite in DIR, the default) or a
        /// PostgreSQL database (postgres://USER@HOST/DB, or `host=/socket/dir dbname=DB`);
        /// recorded in the config, so `run` uses it too.
        #[arg(long, value_name = "STORE")]
        meta: Option<String>,
    },
    /// Make DIR the directory of one more manager of the cluster whose manager's directory is
    /// FROM, on the same PostgreSQL database: one manager serves at a time, the others stand
    /// by and take over when it dies (docs/manager.md).
    Join {
        #[arg(long, value_name = "FROM")]
        from: PathBuf,
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        #[arg(long)]
        listen: String,
        /// Extra DNS name or address for this manager's certificate (repeatable).
        #[arg(long = "name")]
        names: Vec<String>,
    },
    /// Serve the manager in DIR until SIGTERM or ctrl-c.
    Run {
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// HOST:PORT (default: the one given at init).
        #[arg(long)]
        listen: Option<String>,
        /// Where the metadata lives (default: where `init` recorded it): `sqlite` or a
        /// PostgreSQL connection string, as for `init`.
        #[arg(long, value_name = "STORE")]
        meta: Option<String>,
        /// For a manager whose keys are sealed: the passphrase ($NASD_MANAGER_PASSPHRASE,
        /// this file, or asked).
        #[arg(long, value_name = "FILE")]
        passphrase_file: Option<PathBuf>,
        #[command(flatten)]
        metrics: crate::metrics::MetricsArgs,
    },
    /// Seal the keys of the stopped manager in DIR under a passphrase: the drives' keys in its
    /// store and its OPAQUE key file, so a copy of the directory gives neither away; it then
    /// needs the passphrase ($NASD_MANAGER_PASSPHRASE, --passphrase-file, or asked) to start.
    /// With --change, change the passphrase of a sealed manager instead: the current one from
    /// $NASD_MANAGER_PASSPHRASE, --passphrase-file or asked, the new one from
    /// $NASD_MANAGER_NEW_PASSPHRASE, --new-passphrase-file or asked (twice). Every key is
    /// sealed anew in one step a crash cannot leave half done: either passphrase then opens
    /// all of them, the old one until the change commits, the new one after.
    Seal {
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// The passphrase to seal with; with --change, the current one.
        #[arg(long, value_name = "FILE")]
        passphrase_file: Option<PathBuf>,
        /// Change the passphrase of a manager sealed already.
        #[arg(long)]
        change: bool,
        /// With --change: the new passphrase.
        #[arg(long, value_name = "FILE", requires = "change")]
        new_passphrase_file: Option<PathBuf>,
    },
    /// Register a drive with the manager of the client config (admin).
    DriveAdd {
        #[arg(long, value_name = "ADDR")]
        addr: String,
        /// The drive's drive-key file (`DIR/keys/drive.key` of `nasd drive init`).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// The drive's master key file: the manager then replaces the drive key with one only
        /// it knows, so the drive key file stops working.
        #[arg(long, value_name = "FILE")]
        master_key: Option<PathBuf>,
    },
    /// Registered drives and their health.
    Drives {
        #[arg(long)]
        json: bool,
    },
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}

pub fn run(c: ManagerCmd) -> anyhow::Result<()> {
    match c {
        ManagerCmd::Init {
            data,
            listen,
            admin,
            admin_password_file,
            names,
            meta,
        } => {
            let meta = match meta {
                Some(m) => setup::Meta::parse(&m)?,
                None => setup::Meta::Sqlite,
            };
            let admin_password = match admin_password_file {
                Some(f) => std::fs::read_to_string(&f)
                    .with_context(|| format!("{}", f.display()))?
                    .trim_end_matches('\n')
                    .to_string(),
                None => match std::env::var("NASD_NEW_PASSWORD") {
                    Ok(p) => p,
                    Err(_) => {
                        eprint!("password for {admin}: ");
                        let mut s = String::new();
                        std::io::stdin().read_line(&mut s)?;
                        s.trim_end_matches(['\n', '\r']).to_string()
                    }
                },
            };
            setup::init(&setup::InitOptions {
                dir: data.clone(),
                listen,
                admin_user: admin.clone(),
                admin_password,
                names,
                policy: Policy::default(),
                meta,
            })?;
            println!("manager initialized in {}", data.display());
            println!("cluster CA         {}", data.join("tls/ca.der").display());
            println!("admin user         {admin}");
            Ok(())
        }
        ManagerCmd::Join {
            from,
            data,
            listen,
            names,
        } => {
            setup::join(&from, &data, &listen, &names)?;
            println!(
                "manager joined in {} (listens on {listen}; stands by while another leads)",
                data.display()
            );
            Ok(())
        }
        ManagerCmd::Seal {
            data,
            passphrase_file,
            change: true,
            new_passphrase_file,
        } => {
            let old = manager_passphrase(passphrase_file.as_deref())?;
            let new = new_manager_passphrase(new_passphrase_file.as_deref())?;
            setup::change_passphrase(&data, &old, &new)?;
            println!(
                "the keys of the manager in {} are sealed under the new passphrase; the old \
                 one opens nothing now",
                data.display()
            );
            Ok(())
        }
        ManagerCmd::Seal {
            data,
            passphrase_file,
            change: false,
            ..
        } => {
            let p = manager_passphrase(passphrase_file.as_deref())?;
            setup::seal(&data, &p)?;
            println!(
                "keys of the manager in {} sealed: it now needs the passphrase to start",
                data.display()
            );
            Ok(())
        }
        ManagerCmd::Run {
            data,
            listen,
            meta,
            passphrase_file,
            metrics,
        } => {
            // Warnings by default; `RUST_LOG=info` adds a line per capability minted, with
            // the audit id the drives' audit trails record.
            crate::log_to_stderr("warn");
            crate::runtime()?.block_on(async move {
                let meta = meta.as_deref().map(setup::Meta::parse).transpose()?;
                let file = passphrase_file.clone();
                setup::run(
                    &data,
                    listen.as_deref(),
                    meta.as_ref(),
                    Box::new(move || {
                        manager_passphrase(file.as_deref()).map_err(|e| {
                            nasd_manager::MgrError::new(
                                nasd_proto::manager::MgrStatus::InvalidArgument,
                                format!("{e:#}"),
                            )
                        })
                    }),
                    metrics.metrics.as_deref(),
                    |event| {
                        match event {
                            setup::Event::Standby { listen } => println!(
                                "nasd manager standing by for {listen}: another manager leads \
                                 its database"
                            ),
                            setup::Event::Listening(at) => {
                                if let Some(m) = at.metrics {
                                    println!("nasd manager metrics on http://{m}/metrics");
                                }
                                println!("nasd manager listening on {}", at.addr);
                            }
                        }
                        use std::io::Write as _;
                        std::io::stdout().flush().ok();
                    },
                    shutdown_signal(),
                )
                .await?;
                Ok(())
            })
        }
        ManagerCmd::DriveAdd {
            addr,
            key,
            master_key,
        } => crate::runtime()?.block_on(async move {
            let text =
                std::fs::read_to_string(&key).with_context(|| format!("{}", key.display()))?;
            let master_key_file = match &master_key {
                Some(p) => {
                    std::fs::read_to_string(p).with_context(|| format!("{}", p.display()))?
                }
                None => String::new(),
            };
            let c = crate::cmd_fs::connect().await?;
            c.call(
                "/",
                calls::DriveAdd {
                    addr: addr.clone(),
                    drive_key_file: text,
                    master_key_file,
                },
            )
            .await?;
            println!("drive at {addr} registered");
            Ok(())
        }),
        ManagerCmd::Drives { json } => crate::runtime()?.block_on(async move {
            let c = crate::cmd_fs::connect().await?;
            let ds = c.call("/", calls::DriveList).await?;
            for d in ds {
                if json {
                    println!(
                        "{}",
                        serde_json::json!({"drive": format!("{:016x}", d.drive.0), "addr": d.addr,
                            "partition": d.partition.0, "healthy": d.healthy, "files": d.files,
                            "key_rotated_ms": d.key_rotated_ms, "detail": d.detail,
                            "stale": d.stale, "capacity_bytes": d.capacity_bytes,
                            "used_bytes": d.used_bytes})
                    );
                } else {
                    println!(
                        "{:016x} {:<22} {:<9} files {:<8} stale {:<6} {}",
                        d.drive.0,
                        d.addr,
                        if d.healthy { "healthy" } else { "DOWN" },
                        d.files,
                        d.stale,
                        d.detail
                    );
                }
            }
            Ok(())
        }),
    }
}

/// The passphrase of the manager's sealed keys: $NASD_MANAGER_PASSPHRASE, `file`, or asked.
/// The new passphrase of a change: $NASD_MANAGER_NEW_PASSPHRASE, `file`, or asked twice.
fn new_manager_passphrase(
    file: Option<&std::path::Path>,
) -> anyhow::Result<zeroize::Zeroizing<Vec<u8>>> {
    const ENV: &str = "NASD_MANAGER_NEW_PASSPHRASE";
    let prompt = "new passphrase of the manager's keys: ";
    let p = zeroize::Zeroizing::new(crate::cmd_drive::passphrase(ENV, file, prompt)?);
    if std::env::var_os(ENV).is_none() && file.is_none() {
        let again = zeroize::Zeroizing::new(crate::cmd_drive::passphrase(
            ENV,
            None,
            "the new passphrase again: ",
        )?);
        anyhow::ensure!(
            *again == *p,
            "the two new passphrases differ; nothing changed"
        );
    }
    anyhow::ensure!(!p.is_empty(), "an empty passphrase; nothing changed");
    Ok(p)
}

fn manager_passphrase(
    file: Option<&std::path::Path>,
) -> anyhow::Result<zeroize::Zeroizing<Vec<u8>>> {
    crate::cmd_drive::passphrase(
        "NASD_MANAGER_PASSPHRASE",
        file,
        "passphrase of the manager's keys: ",
    )
    .map(zeroize::Zeroizing::new)
}
