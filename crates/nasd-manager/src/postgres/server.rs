//! A private PostgreSQL server from the system's binaries: `nasd up --meta postgres` keeps one
//! under `DATA/postgres`, and the tests start throwaway ones. Its data directory holds its
//! log (`server.log`) and its unix socket; it listens on no TCP port, and trusts whoever
//! reaches the socket, which only its own account and root can (the directory is 0700).
//!
//! PostgreSQL refuses to run as root. Run as root, the server runs as an unprivileged
//! account ([`ACCOUNT_DEFAULT`], Debian's `postgres`, or `$NASD_PG_USER`): its directory is
//! given to that account, and `initdb` and `pg_ctl` run under its uid and gid (set by
//! `Command::uid`/`gid` before they start). The account must be able to reach the directory,
//! so its parent is made searchable by others (mode `o+x`: they may pass through, not list
//! it); every ancestor above must be searchable already, or starting fails naming the one
//! that is not. Run as anyone else, the server runs as that user.
//!
//! The binaries (`initdb`, `pg_ctl`) come from `$NASD_PG_BIN` if set, else `PATH`, else the
//! newest `/usr/lib/postgresql/*/bin` (where Debian puts them). Missing, every call fails
//! with [`ServerError::NoBinaries`], which says how to install them.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The account a server started by root runs as, unless `$NASD_PG_USER` names another.
pub const ACCOUNT_DEFAULT: &str = "postgres";
/// The database user `initdb` makes (the server's superuser).
pub const SUPERUSER: &str = "nasd";
/// How long `pg_ctl` waits for the server to start or stop, in seconds.
const PG_CTL_WAIT_S: u32 = 60;
/// The longest path a unix socket may have (`sun_path` less its terminating zero).
const SOCKET_PATH_MAX: usize = 107;
/// The file name of the socket in the server's directory (PostgreSQL's, for port 5432).
const SOCKET_NAME: &str = ".s.PGSQL.5432";

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(
        "PostgreSQL's {program} is not on PATH nor in /usr/lib/postgresql/*/bin (nor \
         $NASD_PG_BIN): install PostgreSQL's server (Debian: apt-get install postgresql)"
    )]
    NoBinaries { program: &'static str },
    #[error(
        "PostgreSQL does not run as root, and the account `{account}` it would run as does \
         not exist (Debian's postgresql package makes `postgres`; $NASD_PG_USER names another)"
    )]
    NoAccount { account: String },
    #[error(
        "the PostgreSQL account (uid {uid}) cannot reach {dir}: {blocking} is not searchable \
         by others (mode {mode:o}); put the data directory elsewhere"
    )]
    Unreachable {
        uid: u32,
        dir: PathBuf,
        blocking: PathBuf,
        mode: u32,
    },
    #[error("the socket path {path} is longer than {SOCKET_PATH_MAX} bytes")]
    SocketPath { path: PathBuf },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{command} failed ({status}): {output}")]
    Command {
        command: String,
        status: String,
        output: String,
    },
    #[error("creating database {name}: {source}")]
    CreateDatabase {
        name: String,
        #[source]
        source: crate::store::StoreError,
    },
}

/// The unprivileged account a server runs as when root starts it.
#[derive(Clone, Debug)]
struct Account {
    uid: u32,
    gid: u32,
}

/// A PostgreSQL server whose data directory is `dir`.
#[derive(Clone, Debug)]
pub struct PrivateServer {
    dir: PathBuf,
    bin: PathBuf,
    account: Option<Account>,
}

impl PrivateServer {
    /// The server in `dir` (initialized or not), with the binaries and account it runs with.
    pub fn new(dir: &Path) -> Result<PrivateServer, ServerError> {
        let socket = dir.join(SOCKET_NAME);
        if socket.as_os_str().len() > SOCKET_PATH_MAX {
            return Err(ServerError::SocketPath { path: socket });
        }
        Ok(PrivateServer {
            dir: dir.to_path_buf(),
            bin: binaries()?,
            account: account()?,
        })
    }

    /// The data directory (also where the socket is).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether `initdb` has made the data directory.
    pub fn is_initialized(&self) -> bool {
        self.dir.join("PG_VERSION").exists()
    }

    /// Makes the data directory (`initdb`) unless it exists, listening on its socket only.
    pub fn init(&self) -> Result<(), ServerError> {
        if self.is_initialized() {
            return Ok(());
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| io("creating", &self.dir, e))?;
        self.give_to_account()?;
        self.make_reachable()?;
        let dir = self.dir.as_os_str().to_owned();
        self.run(
            "initdb",
            &[
                "--auth=trust".as_ref(),
                "--encoding=UTF8".as_ref(),
                "--locale=C".as_ref(),
                format!("--username={SUPERUSER}").as_ref(),
                "-D".as_ref(),
                dir.as_os_str(),
            ],
        )?;
        let quoted = self.dir.to_string_lossy().replace('\'', "''");
        let conf = format!(
            "\n# nasd: a private server, on its unix socket only\nlisten_addresses = ''\n\
             unix_socket_directories = '{quoted}'\n"
        );
        let path = self.dir.join("postgresql.conf");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| io("opening", &path, e))?;
        std::io::Write::write_all(&mut f, conf.as_bytes()).map_err(|e| io("writing", &path, e))
    }

    /// Whether the server runs (`pg_ctl status`).
    pub fn is_running(&self) -> bool {
        self.command("pg_ctl")
            .args(["status", "-D"])
            .arg(&self.dir)
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// Starts the server (initializing it first if needed) unless it runs, and waits until it
    /// accepts connections.
    pub fn start(&self) -> Result<(), ServerError> {
        self.init()?;
        self.make_reachable()?;
        if self.is_running() {
            return Ok(());
        }
        let log = self.dir.join("server.log");
        self.run(
            "pg_ctl",
            &[
                "start".as_ref(),
                "-w".as_ref(),
                "-t".as_ref(),
                PG_CTL_WAIT_S.to_string().as_ref(),
                "-D".as_ref(),
                self.dir.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
            ],
        )
    }

    /// Stops the server (fast shutdown: sessions are ended, committed work is on disk) and
    /// waits until it is gone; nothing if it does not run.
    pub fn stop(&self) -> Result<(), ServerError> {
        if !self.is_running() {
            return Ok(());
        }
        self.run(
            "pg_ctl",
            &[
                "stop".as_ref(),
                "-w".as_ref(),
                "-t".as_ref(),
                PG_CTL_WAIT_S.to_string().as_ref(),
                "-m".as_ref(),
                "fast".as_ref(),
                "-D".as_ref(),
                self.dir.as_os_str(),
            ],
        )
    }

    /// The connection string of database `dbname` on this server.
    pub fn conninfo(&self, dbname: &str) -> String {
        let host = self.dir.to_string_lossy().replace('\\', "\\\\");
        format!(
            "host='{}' user={SUPERUSER} dbname={dbname}",
            host.replace('\'', "\\'")
        )
    }

    /// Creates database `name` (letters, digits and `_` only) unless it exists.
    pub fn create_database(&self, name: &str) -> Result<(), ServerError> {
        assert!(
            name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "database names are the caller's constants"
        );
        let failed = |source| ServerError::CreateDatabase {
            name: name.into(),
            source,
        };
        let c = super::conn::Conn::connect(&self.conninfo("postgres")).map_err(failed)?;
        let exists = c
            .query_row(
                "SELECT EXISTS(SELECT 1 FROM pg_database WHERE datname = $1)",
                super::conn::params![name],
                |r| r.get::<bool>(0),
            )
            .map_err(failed)?;
        if !exists {
            c.execute_batch(&format!("CREATE DATABASE {name}"))
                .map_err(failed)?;
        }
        Ok(())
    }

    /// `program` of the server's binaries, run as its account in its directory.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        if let Some(a) = &self.account {
            c.uid(a.uid).gid(a.gid);
        }
        if self.dir.is_dir() {
            c.current_dir(&self.dir);
        } else {
            c.current_dir("/");
        }
        c
    }

    /// Runs `program ARGS` and waits for it; a failure carries its output.
    fn run(&self, program: &'static str, args: &[&std::ffi::OsStr]) -> Result<(), ServerError> {
        let mut c = self.command(program);
        c.args(args).stdin(std::process::Stdio::null());
        let out = c
            .output()
            .map_err(|e| io("running", &self.bin.join(program), e))?;
        if out.status.success() {
            return Ok(());
        }
        let mut output = String::from_utf8_lossy(&out.stderr).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stdout));
        if program == "pg_ctl" {
            output.push_str(&self.log_tail());
        }
        Err(ServerError::Command {
            command: format!("{} {}", program, args.join(" ".as_ref()).to_string_lossy()),
            status: out.status.to_string(),
            output: output.trim().to_string(),
        })
    }

    /// The end of the server's log (why it failed to start).
    fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join("\n");
        format!("\nserver.log:\n{tail}")
    }

    /// Gives the data directory to the account (nothing when the server runs as its caller).
    fn give_to_account(&self) -> Result<(), ServerError> {
        let Some(a) = &self.account else {
            return Ok(());
        };
        std::os::unix::fs::chown(&self.dir, Some(a.uid), Some(a.gid))
            .map_err(|e| io("giving to the PostgreSQL account", &self.dir, e))
    }

    /// Lets the account pass through the directories above its own: the parent gains `o+x`;
    /// every ancestor above must have it already.
    fn make_reachable(&self) -> Result<(), ServerError> {
        let Some(a) = &self.account else {
            return Ok(());
        };
        let Some(parent) = self.dir.parent() else {
            return Ok(());
        };
        let meta = std::fs::metadata(parent).map_err(|e| io("reading", parent, e))?;
        if meta.mode() & 0o001 == 0 {
            let mode = (meta.mode() & 0o7777) | 0o001;
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(mode))
                .map_err(|e| io("letting the PostgreSQL account through", parent, e))?;
        }
        for up in parent.ancestors().skip(1) {
            let m = std::fs::metadata(up).map_err(|e| io("reading", up, e))?;
            let searchable = if m.uid() == a.uid {
                m.mode() & 0o100 != 0
            } else if m.gid() == a.gid {
                m.mode() & 0o010 != 0
            } else {
                m.mode() & 0o001 != 0
            };
            if !searchable {
                return Err(ServerError::Unreachable {
                    uid: a.uid,
                    dir: self.dir.clone(),
                    blocking: up.to_path_buf(),
                    mode: m.mode() & 0o7777,
                });
            }
        }
        Ok(())
    }
}

fn io(what: &'static str, path: &Path, source: std::io::Error) -> ServerError {
    ServerError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// The directory holding `initdb` and `pg_ctl`: `$NASD_PG_BIN`, else the first on `PATH`,
/// else the newest Debian one.
fn binaries() -> Result<PathBuf, ServerError> {
    let has_both = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(d) = std::env::var_os("NASD_PG_BIN") {
        let d = PathBuf::from(d);
        return if has_both(&d) {
            Ok(d)
        } else {
            Err(ServerError::NoBinaries { program: "initdb" })
        };
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    if let Some(d) = on_path.into_iter().find(|d| has_both(d)) {
        return Ok(d);
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, d)| has_both(d))
        .collect();
    debian.sort();
    debian
        .pop()
        .map(|(_, d)| d)
        .ok_or(ServerError::NoBinaries { program: "initdb" })
}

/// The account the server runs as: none (the caller's own) unless the caller is root.
fn account() -> Result<Option<Account>, ServerError> {
    // The owner of /proc/self is this process's effective user.
    let me =
        std::fs::metadata("/proc/self").map_err(|e| io("reading", "/proc/self".as_ref(), e))?;
    if me.uid() != 0 {
        return Ok(None);
    }
    let name = std::env::var("NASD_PG_USER").unwrap_or_else(|_| ACCOUNT_DEFAULT.into());
    let out = Command::new("getent")
        .args(["passwd", &name])
        .output()
        .map_err(|e| io("running", "getent".as_ref(), e))?;
    let line = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = line.trim().split(':').collect();
    let id = |i: usize| fields.get(i).and_then(|f| f.parse::<u32>().ok());
    match (out.status.success(), id(2), id(3)) {
        (true, Some(uid), Some(gid)) if uid != 0 => Ok(Some(Account { uid, gid })),
        _ => Err(ServerError::NoAccount { account: name }),
    }
}
