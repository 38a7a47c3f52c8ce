//! The user's commands (`cp` is in [`crate::cmd_cp`]): `ls`, `cat`, `stat`, `mkdir`, `rm`, `mv`,
//! `chmod`, `chown`, `truncate`, `touch`, `user ...`, `group ...`, `login`, `logout`. They
//! read the client config ([`nasd_client::config`]) that `nasd up` writes (`$NASD_CONFIG`, else
//! `$NASD_DATA/client.json`, else the cluster `nasd up` last started, else
//! `~/.local/share/nasd/client.json`) and talk to the manager as the configured user.
//!
//! Credentials, first found wins (for the user `$NASD_USER`, else the config's): `$NASD_KEY`
//! (an Ed25519 secret key file); `$NASD_PASSWORD`; the session token saved by `nasd login`
//! (`session-USER.token` beside the config); the config's password file.

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use nasd_client::config::{saved_token, token_path, ClientFile, ConfigSearch, CredentialChoice};
use nasd_client::escape::shown;
use nasd_client::files::{Client, FsError};
use nasd_client::session::SessionConfig;
use nasd_proto::manager::calls;
use nasd_proto::manager::{Credential, DirEntry, FileKind, FileStat, MgrStatus};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Transfers at least this large show a progress bar.
pub(crate) const PROGRESS_BYTES_MIN: u64 = 8 << 20;

/// The client config commands use: `$NASD_CONFIG`, `$NASD_DATA/client.json`, the cluster
/// `nasd up` last started, or the default one ([`nasd_client::config::ConfigSearch`]).
pub fn config_path() -> anyhow::Result<PathBuf> {
    Ok(ConfigSearch::from_env().find()?.path)
}

/// The session config for the configured (or `$NASD_USER`) user, with the credentials of
/// `$NASD_KEY` or `$NASD_PASSWORD` when set (see [`nasd_client::config`] for the order).
pub fn session_config(config: &Path) -> anyhow::Result<SessionConfig> {
    let c = ClientFile::load(config)?;
    Ok(c.session_config(
        config,
        CredentialChoice {
            user: std::env::var("NASD_USER").ok(),
            key_file: std::env::var_os("NASD_KEY").map(PathBuf::from),
            password: std::env::var("NASD_PASSWORD").ok(),
        },
    )?)
}

pub async fn connect() -> anyhow::Result<Arc<Client>> {
    let path = config_path()?;
    let cfg = session_config(&path)?;
    let cache = nasd_client::config::e2e_key_path(&path, &cfg.user);
    let c = Client::connect(cfg).await?;
    c.set_identity_source(nasd_client::e2e::keyring::IdentitySource::Login { cache: Some(cache) });
    Ok(c)
}

/// A remote path: `nasd:/x` or, where only remote paths make sense, `/x`.
pub(crate) fn remote(p: &str) -> anyhow::Result<String> {
    let r = p.strip_prefix("nasd:").unwrap_or(p);
    if !r.starts_with('/') {
        bail!("{p}: remote paths are absolute (nasd:/path)");
    }
    Ok(r.to_string())
}

fn parse_mode(s: &str) -> anyhow::Result<u32> {
    let m = u32::from_str_radix(s, 8).with_context(|| format!("{s}: modes are octal, e.g. 640"))?;
    if m > 0o7777 {
        bail!("{s}: mode out of range");
    }
    Ok(m)
}

/// A new password: `$NASD_NEW_PASSWORD` (scripts), else asked for on the terminal.
fn read_password(prompt: &str) -> anyhow::Result<String> {
    if let Ok(p) = std::env::var("NASD_NEW_PASSWORD") {
        return Ok(p);
    }
    prompt_secret(prompt)
}

/// Reads one line from stdin after printing `prompt` to stderr; when stdin is a terminal its
/// echo is off while the line is typed, so the secret never shows on screen.
pub(crate) fn prompt_secret(prompt: &str) -> anyhow::Result<String> {
    eprint!("{prompt}");
    let mut s = String::new();
    let fd = libc::STDIN_FILENO;
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(fd) } == 1 {
        with_echo_off(fd, || std::io::stdin().read_line(&mut s))??;
        eprintln!();
    } else {
        std::io::stdin().read_line(&mut s)?;
    }
    let p = s.trim_end_matches(['\n', '\r']).to_string();
    if p.is_empty() {
        bail!("no password given");
    }
    Ok(p)
}

/// Runs `f` with the terminal `fd`'s echo turned off (termios), restoring the previous
/// settings afterwards, also when `f` fails.
fn with_echo_off<T>(fd: i32, f: impl FnOnce() -> T) -> std::io::Result<T> {
    // SAFETY: termios is plain data; tcgetattr fills it or fails without touching it.
    let mut saved: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `saved` is a valid termios to write into.
    if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut quiet = saved;
    quiet.c_lflag &= !libc::ECHO;
    quiet.c_lflag |= libc::ECHONL;
    // SAFETY: `quiet` is a termios derived from the terminal's own settings.
    if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &quiet) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let out = f();
    // SAFETY: restores the settings read above.
    unsafe { libc::tcsetattr(fd, libc::TCSANOW, &saved) };
    Ok(out)
}

#[derive(Args, Debug)]
pub struct LsArgs {
    #[arg(default_value = "/")]
    pub path: String,
    #[arg(long)]
    pub json: bool,
    /// Long listing: mode, owner, group, size, time.
    #[arg(short = 'l')]
    pub long: bool,
}

#[derive(Subcommand, Debug)]
pub enum UserCmd {
    /// Add a user (admin only), with no password and no keys: prints a one-time enrollment
    /// code to give to the user, who sets their password with `nasd user enroll` (their own
    /// client makes their keys at their first login); with --public-key the user logs in with
    /// that key instead.
    Add {
        name: String,
        #[arg(long)]
        admin: bool,
        /// An Ed25519 public key file (from `nasd user keygen`): the user logs in with the
        /// matching secret key and has no password.
        #[arg(long, value_name = "FILE")]
        public_key: Option<PathBuf>,
        /// Set the password now, from this (the admin's) client, instead of printing an
        /// enrollment code: read from $NASD_NEW_PASSWORD or the terminal. For accounts a
        /// program or script uses: the manager still never sees the password, but the admin
        /// knows it, and the account's first keys are made here too (a login as the user), so
        /// its group keys reach it at once; `nasd user rotate-keys` as the user replaces them.
        #[arg(long, conflicts_with = "public_key")]
        password: bool,
        /// Print {"name", "uid", "enrollment_code", "expires_ms"}.
        #[arg(long)]
        json: bool,
    },
    /// Set NAME's password with the enrollment code `user add` (or an admin's `user passwd`)
    /// printed: the password is read from the terminal or $NASD_NEW_PASSWORD and never sent to
    /// the manager (OPAQUE registration). Needs no login.
    Enroll {
        name: String,
        #[arg(long)]
        code: String,
    },
    /// Make yourself a new end-to-end key pair (seed) and move every wrap of a file key or a
    /// group secret that was addressed to the old one over to it; files written afterwards
    /// are wrapped to the new key only. Needs your password ($NASD_PASSWORD or the terminal).
    RotateKeys,
    /// Make an Ed25519 key pair: the secret key to FILE (mode 0600), the public key to FILE.pub.
    Keygen {
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Change your own password (never sent to the manager: OPAQUE registration), reset
    /// another user's as admin (a new enrollment code is printed), or with --public-key make
    /// the user log in with that key instead. Ends every session of the user.
    Passwd {
        name: String,
        /// An Ed25519 public key file (from `nasd user keygen`): the user's new credential.
        #[arg(long, value_name = "FILE")]
        public_key: Option<PathBuf>,
    },
    /// Let NAME act for other (non-admin) users without their credentials, or stop it
    /// (admin only): for a trusted front end such as the S3 gateway. Turning it off ends the
    /// sessions it opened.
    Gateway {
        name: String,
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
    /// S3 access keys (for the S3 gateway): a user's own, or anyone's as admin.
    #[command(name = "s3-key", subcommand)]
    S3Key(S3KeyCmd),
    /// List users and their groups.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show NAME's key fingerprint (of the first keys of their chain, which key rotations
    /// keep), to compare with what NAME's own client shows, by phone or in person.
    Fingerprint {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Record that NAME's fingerprint was checked out of band: refused unless FINGERPRINT is
    /// the one the key log shows this client. Needed before files are wrapped to keys that
    /// followed a reset.
    Verify { name: String, fingerprint: String },
    /// Clear NAME's end-to-end keys (admin only), for a user who lost every key: the reset is
    /// logged and shown to every client; NAME's next login makes new keys.
    ResetKeys { name: String },
    /// Print the key log's size and root as this client holds it (or its root at --at
    /// entries), for two users to compare: different roots at one size mean the manager
    /// showed them different logs.
    KeyLog {
        #[arg(long)]
        at: Option<u64>,
    },
}

#[derive(Subcommand, Debug)]
pub enum S3KeyCmd {
    /// Make a key for USER; the secret is shown this once.
    Create {
        user: String,
        /// Print {"access_key_id": ..., "secret_access_key": ...}.
        #[arg(long)]
        json: bool,
    },
    /// List USER's key ids.
    List {
        user: String,
        #[arg(long)]
        json: bool,
    },
    /// Revoke USER's key ACCESS_KEY_ID.
    Revoke { user: String, access_key_id: String },
}

#[derive(Subcommand, Debug)]
pub enum GroupCmd {
    /// Add a group (admin only). Its key pair is made by its first member's client that
    /// needs it: an admin who is not a member holds no key of the group.
    Add { name: String },
    /// Add USER to GROUP, or with --remove end the membership (admin only). A new member gets
    /// their wrap of the group's key from a member's client (`nasd group sync` as a member,
    /// or at a member's next use of the group); a removed member's wrap goes, and the group's
    /// next writer among its members makes it a new key pair, so the removed member's key
    /// opens nothing written after.
    Member {
        group: String,
        user: String,
        /// End USER's membership of GROUP instead.
        #[arg(long)]
        remove: bool,
    },
    /// As a member of GROUP (default: of each of your groups): give every member who has keys
    /// but no wrap of the group's secret one (to the keys your checked key log shows), and
    /// make the group's key pair if it has none or is due a new one (a member left).
    Sync { groups: Vec<String> },
}

fn time_str(us: u64) -> String {
    let secs = (us / 1_000_000) as i64;
    // UTC, YYYY-MM-DD HH:MM (civil-from-days, Howard Hinnant).
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

fn mode_str(s: &FileStat) -> String {
    let mut out = String::from(match s.kind {
        FileKind::Dir => "d",
        FileKind::Symlink => "l",
        FileKind::File => "-",
        FileKind::Fifo => "p",
        FileKind::Socket => "s",
        FileKind::CharDevice => "c",
        FileKind::BlockDevice => "b",
    });
    for shift in [6, 3, 0] {
        let b = (s.mode >> shift) & 7;
        out.push(if b & 4 != 0 { 'r' } else { '-' });
        out.push(if b & 2 != 0 { 'w' } else { '-' });
        out.push(if b & 1 != 0 { 'x' } else { '-' });
    }
    out
}

fn stat_json(name: Option<&str>, s: &FileStat) -> serde_json::Value {
    let mut v = serde_json::json!({
        "ino": s.ino,        "kind": match s.kind {
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            FileKind::File => "file",
            FileKind::Fifo => "fifo",
            FileKind::Socket => "socket",
            FileKind::CharDevice => "char-device",
            FileKind::BlockDevice => "block-device",
        },
        "nlink": s.nlink,
        "mode": format!("{:o}", s.mode),
        "owner": s.owner,
        "group": s.group,
        "uid": s.uid,
        "gid": s.gid,
        "size": s.size,
        "mtime_us": s.mtime_us,
        "ctime_us": s.ctime_us,
    });
    if let Some(n) = name {
        v["name"] = n.into();
    }
    v
}

pub(crate) fn progress_bar(total: u64, label: &str) -> Arc<dyn Fn(u64) + Send + Sync> {
    use std::io::IsTerminal;
    if total < PROGRESS_BYTES_MIN || !std::io::stderr().is_terminal() {
        return Arc::new(|_| {});
    }
    let pb = indicatif::ProgressBar::new(total);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    pb.set_message(label.to_string());
    Arc::new(move |done| {
        pb.set_position(done);
        if done >= total {
            pb.finish_and_clear();
        }
    })
}

/// Checks a local name for upload: UTF-8 (the namespace is UTF-8) and no traversal.
pub(crate) fn upload_name(p: &Path) -> anyhow::Result<String> {
    let name = p
        .file_name()
        .with_context(|| format!("{}: has no file name", p.display()))?;
    let s = name.to_str().with_context(|| {
        format!(
            "{}: the name is not valid UTF-8 (nasd names are UTF-8)",
            p.display()
        )
    })?;
    if s == ".." || s == "." {
        bail!("{}: refusing a `..` or `.` name", p.display());
    }
    Ok(s.to_string())
}

pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Prints a listing. Names, owners and groups come from the manager and were chosen by other
/// users: they are printed through [`shown`], so none can draw a line of its own.
fn print_entries(entries: &[DirEntry], targets: &[Option<String>], long: bool) {
    for (e, target) in entries.iter().zip(targets) {
        let slash = if e.stat.kind == FileKind::Dir {
            "/"
        } else {
            ""
        };
        if long {
            println!(
                "{} {:>3} {:<8} {:<8} {:>12} {} {}{}",
                mode_str(&e.stat),
                e.stat.nlink,
                shown(&e.stat.owner),
                shown(&e.stat.group),
                e.stat.size,
                time_str(e.stat.mtime_us),
                shown(&e.name),
                match target {
                    Some(t) => format!(" -> {}", shown(t)),
                    None => slash.to_string(),
                }
            );
        } else {
            println!("{}{}", shown(&e.name), slash);
        }
    }
}

pub async fn ls(a: LsArgs) -> anyhow::Result<()> {
    let c = connect().await?;
    let p = remote(&a.path)?;
    let st = c.stat(&p).await?;
    let entries = if st.kind == FileKind::Dir {
        c.list(&p).await?
    } else {
        vec![DirEntry {
            name: p.rsplit('/').next().unwrap_or("").to_string(),
            stat: st,
            xattr: None,
        }]
    };
    // Symbolic links show their targets (one round trip each, only for links).
    let mut targets = Vec::with_capacity(entries.len());
    for e in &entries {
        targets.push(if e.stat.kind == FileKind::Symlink && (a.long || a.json) {
            c.readlink(&join(&p, &e.name)).await.ok()
        } else {
            None
        });
    }
    if a.json {
        for (e, t) in entries.iter().zip(&targets) {
            let mut v = stat_json(Some(&e.name), &e.stat);
            if let Some(t) = t {
                v["target"] = t.as_str().into();
            }
            println!("{v}");
        }
    } else {
        print_entries(&entries, &targets, a.long);
    }
    Ok(())
}

pub async fn cat(paths: Vec<String>) -> anyhow::Result<()> {
    use std::io::Write;
    let c = connect().await?;
    let mut out = std::io::stdout().lock();
    for p in paths {
        let p = remote(&p)?;
        let data = c.get_bytes(&p).await?;
        out.write_all(&data)?;
    }
    Ok(())
}

/// What `stat` says of a file's end-to-end protection: plaintext, or the construction, key
/// version, who committed the version and whether its signature verifies (seed 001 §3.3).
async fn e2e_lines(c: &Client, path: &str) -> anyhow::Result<(String, serde_json::Value)> {
    let Some(p) = c.e2e_provenance(path).await? else {
        return Ok(("plaintext".into(), serde_json::json!({"encrypted": false})));
    };
    let name = |uid: u32| -> String { format!("uid {uid}") };
    let names = c
        .user_names(&[p.writer].into_iter().chain(p.signer).collect::<Vec<_>>())
        .await?;
    let named = |uid: u32| names.get(&uid).cloned().unwrap_or_else(|| name(uid));
    let sig = match (p.verified, p.signer) {
        (Some(true), Some(s)) => format!("signed by {}: verifies", shown(&named(s))),
        (Some(false), Some(s)) => format!("signed by {}: DOES NOT VERIFY", shown(&named(s))),
        _ => "unsigned (keyed hash only)".into(),
    };
    let generation = match p.generation {
        Some(g) => format!("generation {g}"),
        None => "unbound (written before bindings)".into(),
    };
    let signature = match p.verified {
        Some(true) => "verified",
        Some(false) => "invalid",
        None => "none",
    };
    if p.plain {
        let text = format!(
            "plaintext, pinned (readers check each drive against the writer's record), \
             {generation}; written by {}, {sig}",
            shown(&named(p.writer))
        );
        let json = serde_json::json!({
            "encrypted": false,
            "pinned": true,
            "generation": p.generation,
            "writer": named(p.writer),
            "signer": p.signer.map(named),
            "signature": signature,
        });
        return Ok((text, json));
    }
    let readers = c.principal_names(&p.readers).await?;
    let unshared = c.principal_names(&p.unshared).await?;
    let list = |names: &[String]| -> String {
        names
            .iter()
            .map(|r| shown(r).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = format!(
        "encrypted, {}-EINT, key version {}, {generation}; written by {}, {sig}; readable by {}",
        p.scheme.name().to_uppercase(),
        p.key_version,
        shown(&named(p.writer)),
        list(&readers),
    );
    if !unshared.is_empty() {
        text.push_str(&format!("; unshared from {}", list(&unshared)));
    }
    let json = serde_json::json!({
        "encrypted": true,
        "eint": p.scheme.name(),
        "key_version": p.key_version,
        "generation": p.generation,
        "readers": readers,
        "unshared": unshared,
        "writer": named(p.writer),
        "signer": p.signer.map(named),
        "signature": signature,
    });
    Ok((text, json))
}

pub async fn stat(paths: Vec<String>, json: bool) -> anyhow::Result<()> {
    let c = connect().await?;
    for p in paths {
        let p = remote(&p)?;
        let s = c.stat(&p).await?;
        let e2e = match s.kind {
            FileKind::File => Some(e2e_lines(&c, &p).await?),
            _ => None,
        };
        let policy = policy_readers_line(&c, &p, s.kind == FileKind::Dir).await?;
        if json {
            let mut v = stat_json(Some(&p), &s);
            if let Some((_, j)) = &e2e {
                v["e2e"] = j.clone();
            }
            if let Some((_, j)) = &policy {
                v["policy_readers"] = j.clone();
            }
            println!("{v}");
        } else {
            println!("  path  nasd:{}", shown(&p));
            println!(
                "  kind  {}",
                match s.kind {
                    FileKind::Dir => "directory",
                    FileKind::Symlink => "symbolic link",
                    FileKind::File => "file",
                    FileKind::Fifo => "FIFO",
                    FileKind::Socket => "socket",
                    FileKind::CharDevice => "character device",
                    FileKind::BlockDevice => "block device",
                }
            );
            println!("  links {}", s.nlink);
            println!("  size  {}", s.size);
            println!("  mode  {:o} ({})", s.mode, mode_str(&s));
            println!(
                "  owner {} ({})  group {} ({})",
                shown(&s.owner),
                s.uid,
                shown(&s.group),
                s.gid
            );
            println!("  ino   {}", s.ino);
            println!("  mtime {} UTC", time_str(s.mtime_us));
            if let Some((t, _)) = &e2e {
                println!("  e2e   {t}");
            }
            if let Some((t, _)) = &policy {
                println!("  policy readers {t}");
            }
        }
    }
    Ok(())
}

/// What `stat` says of the further readers the policy over `path` names (a directory's own,
/// a file's directory's), as the key log holds them signed: who set them, where and when
/// (issue 21 §5). `None` when no statement names any.
async fn policy_readers_line(
    c: &Client,
    path: &str,
    dir: bool,
) -> anyhow::Result<Option<(String, serde_json::Value)>> {
    let over = match (dir, path.rsplit_once('/')) {
        (false, Some((parent, _))) => parent,
        _ => path,
    };
    let Some(l) = c.readers_logged_over(over).await? else {
        return Ok(None);
    };
    if l.readers.is_empty() {
        return Ok(None);
    }
    let readers = c.principal_names(&l.readers).await?;
    let by = c.user_names(&[l.by]).await?.remove(&l.by);
    let by = by.unwrap_or_else(|| format!("uid {}", l.by));
    let at = time_str(l.at_ms.saturating_mul(1000));
    let text = format!(
        "{}: set on {} by {} at {at} UTC (signed, in the key log)",
        readers
            .iter()
            .map(|r| shown(r).to_string())
            .collect::<Vec<_>>()
            .join(", "),
        shown(&l.dir),
        shown(&by),
    );
    let json = serde_json::json!({
        "readers": readers,
        "dir": l.dir,
        "set_by": by,
        "set_at_ms": l.at_ms,
    });
    Ok(Some((text, json)))
}

/// `nasd share` (`share`) and `nasd unshare`.
pub async fn share(
    path: String,
    users: Vec<String>,
    groups: Vec<String>,
    write: bool,
    share: bool,
) -> anyhow::Result<()> {
    let c = connect().await?;
    let p = remote(&path)?;
    if users.is_empty() && groups.is_empty() {
        bail!("name a --user or a --group");
    }
    if write && !users.is_empty() {
        bail!("--write is for groups (a user writes as the owner or through a group)");
    }
    let mut who = vec![];
    for u in &users {
        who.push(c.principal_named(u, false).await?);
    }
    for g in &groups {
        who.push(c.principal_named(g, true).await?);
    }
    if share {
        c.share(&p, &who).await?;
        if write {
            let s = c.stat(&p).await?;
            let g = groups.first().expect("checked above");
            c.chown(&p, "", g).await?;
            c.chmod(&p, s.mode | 0o060).await?;
        }
        println!("nasd:{}: shared", shown(&p));
    } else {
        c.unshare(&p, &who).await?;
        println!("nasd:{}: unshared; later writes use a fresh key", shown(&p));
    }
    Ok(())
}

/// `nasd rekey`: re-encrypt under a fresh key now.
pub async fn rekey(paths: Vec<String>) -> anyhow::Result<()> {
    let c = connect().await?;
    for p in paths {
        let p = remote(&p)?;
        c.rekey(&p).await?;
        println!("nasd:{}: re-encrypted under a fresh key", shown(&p));
    }
    Ok(())
}

pub async fn mkdir(paths: Vec<String>, parents: bool, mode: &str) -> anyhow::Result<()> {
    let c = connect().await?;
    let mode = parse_mode(mode)?;
    for p in paths {
        let p = remote(&p)?;
        if parents {
            let mut cur = String::new();
            for n in p.split('/').filter(|n| !n.is_empty()) {
                cur = format!("{cur}/{n}");
                match c.mkdir(&cur, mode).await {
                    Ok(()) => {}
                    Err(e) if e.status() == Some(MgrStatus::Exists) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        } else {
            c.mkdir(&p, mode).await?;
        }
    }
    Ok(())
}

async fn rm_tree(c: &Arc<Client>, p: &str) -> Result<(), FsError> {
    for e in c.list(p).await? {
        let child = join(p, &e.name);
        if e.stat.kind == FileKind::Dir {
            Box::pin(rm_tree(c, &child)).await?;
        } else {
            c.unlink(&child).await?;
        }
    }
    c.rmdir(p).await
}

pub async fn rm(paths: Vec<String>, recursive: bool) -> anyhow::Result<()> {
    let c = connect().await?;
    for p in paths {
        let p = remote(&p)?;
        match c.unlink(&p).await {
            Err(e) if e.status() == Some(MgrStatus::IsADirectory) => {
                if recursive {
                    rm_tree(&c, &p).await?;
                } else {
                    c.rmdir(&p).await?;
                }
            }
            r => r?,
        }
    }
    Ok(())
}

pub async fn mv(from: String, to: String) -> anyhow::Result<()> {
    let c = connect().await?;
    let (f, mut t) = (remote(&from)?, remote(&to)?);
    if let Ok(st) = c.stat(&t).await {
        if st.kind == FileKind::Dir {
            t = join(&t, f.rsplit('/').find(|n| !n.is_empty()).unwrap_or(""));
        }
    }
    c.rename(&f, &t).await?;
    Ok(())
}

/// `nasd mount [--allow-other [--users FILE]] [nasd:/PATH] MOUNTPOINT`: serves until
/// unmounted; ctrl-c or SIGTERM unmounts first, so the mount point is never left dead.
pub fn mount(
    paths: Vec<String>,
    allow_other: bool,
    users: Option<std::path::PathBuf>,
    metrics: crate::metrics::MetricsArgs,
) -> anyhow::Result<()> {
    let map = match &users {
        Some(f) => nasd_fuse::IdMap::read(f)?,
        None => nasd_fuse::IdMap::default(),
    };
    // SAFETY: geteuid has no preconditions.
    if allow_other && unsafe { libc::geteuid() } != 0 {
        bail!("--allow-other: only root serves every local user (it reads their saved logins)");
    }
    let (remote, mountpoint) = match paths.as_slice() {
        [mp] => ("/".to_string(), mp.clone()),
        [r, mp] => (remote(r)?, mp.clone()),
        _ => bail!("nasd mount [nasd:/PATH] MOUNTPOINT"),
    };
    // Warnings (an upload that could not be aborted, a lock lost) go to standard error;
    // `RUST_LOG` asks for more.
    crate::log_to_stderr("warn");
    let rt = tokio::runtime::Runtime::new()?;
    let c = rt.block_on(connect())?;
    let mp = std::path::PathBuf::from(&mountpoint);
    crate::unmount_on_signal(&rt, mp.clone());
    let options = nasd_fuse::Options { allow_other, map };
    let counters = match &metrics.metrics {
        Some(_) => {
            let h = rt.handle().clone();
            let m = Arc::new(nasd_fuse::metered::MountMetrics::new(c.clone(), &remote, h));
            rt.block_on(metrics.start("mount", m.clone()))?;
            Some(m)
        }
        None => None,
    };
    nasd_fuse::serve(c, rt.handle().clone(), &remote, &mp, options, counters)
        .with_context(|| format!("mounting nasd:{remote} at {mountpoint}"))
}

pub async fn ln(symbolic: bool, target: String, link: String) -> anyhow::Result<()> {
    let c = connect().await?;
    let mut l = remote(&link)?;
    let last = |p: &str| {
        p.rsplit('/')
            .find(|n| !n.is_empty())
            .unwrap_or("")
            .to_string()
    };
    if symbolic {
        // The target is stored as given: a nasd:/path names a path in the cluster.
        let t = target.strip_prefix("nasd:").unwrap_or(&target).to_string();
        if matches!(c.stat(&l).await, Ok(st) if st.kind == FileKind::Dir) {
            l = join(&l, &last(&t));
        }
        c.symlink(&t, &l).await?;
    } else {
        let t = remote(&target)?;
        if matches!(c.stat(&l).await, Ok(st) if st.kind == FileKind::Dir) {
            l = join(&l, &last(&t));
        }
        c.link(&t, &l).await?;
    }
    Ok(())
}

pub async fn chmod(mode: String, paths: Vec<String>) -> anyhow::Result<()> {
    let c = connect().await?;
    let m = parse_mode(&mode)?;
    for p in paths {
        c.chmod(&remote(&p)?, m).await?;
    }
    Ok(())
}

pub async fn chown(spec: String, paths: Vec<String>) -> anyhow::Result<()> {
    let c = connect().await?;
    let (owner, group) = spec.split_once(':').unwrap_or((&spec, ""));
    for p in paths {
        c.chown(&remote(&p)?, owner, group).await?;
    }
    Ok(())
}

pub async fn truncate(path: String, size: u64) -> anyhow::Result<()> {
    let c = connect().await?;
    c.truncate(&remote(&path)?, size).await?;
    Ok(())
}

/// Microseconds since the Unix epoch of `seconds`, or of now.
fn mtime_us(seconds: Option<f64>) -> anyhow::Result<u64> {
    match seconds {
        Some(s) if s.is_finite() && s >= 0.0 && s < (u64::MAX / 1_000_000) as f64 => {
            Ok((s * 1e6).round() as u64)
        }
        Some(s) => bail!("--mtime {s}: not a time in seconds since the Unix epoch"),
        None => Ok(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_micros() as u64),
    }
}

pub async fn touch(paths: Vec<String>, mtime: Option<f64>, no_create: bool) -> anyhow::Result<()> {
    let c = connect().await?;
    let t = mtime_us(mtime)?;
    for p in paths {
        let p = remote(&p)?;
        if !no_create {
            match c.create(&p, 0o644).await {
                Ok(_) => {}
                Err(e) if e.status() == Some(MgrStatus::Exists) => {}
                Err(e) => return Err(e.into()),
            }
        }
        c.utimes(&p, t).await?;
    }
    Ok(())
}

pub async fn user(cmd: UserCmd) -> anyhow::Result<()> {
    use nasd_proto::manager::S3KeyMade;
    if let UserCmd::Keygen { out } = &cmd {
        nasd_client::userkey::generate(out)?;
        println!(
            "secret key {} (keep it), public key {}",
            out.display(),
            nasd_client::userkey::public_path(out).display()
        );
        return Ok(());
    }
    if let UserCmd::Enroll { name, code } = &cmd {
        return enroll(name, code).await;
    }
    if let UserCmd::RotateKeys = &cmd {
        return rotate_keys().await;
    }
    let c = connect().await?;
    match cmd {
        UserCmd::Keygen { .. } | UserCmd::Enroll { .. } | UserCmd::RotateKeys => {
            unreachable!("handled above")
        }
        UserCmd::Add {
            name,
            admin,
            password: true,
            ..
        } => {
            let password = read_password(&format!("password for {name}: "))?;
            c.add_user_enrolled(&name, &password, admin).await?;
            println!("user {name} added with the password given (the manager never saw it)");
        }
        UserCmd::Add {
            name,
            admin,
            public_key,
            json,
            ..
        } => {
            let public_key = match public_key {
                Some(p) => Some(nasd_client::userkey::read_public(&p)?),
                None => None,
            };
            let made = c.add_user(&name, admin, public_key).await?;
            print_enrollment(&name, &made, json, "added");
        }
        UserCmd::Passwd { name, public_key } => match public_key {
            Some(p) => {
                let public_key = Some(nasd_client::userkey::read_public(&p)?);
                let passwd = calls::UserPasswd {
                    name: name.clone(),
                    public_key,
                };
                c.call("/", passwd).await?;
                println!("key of {name} changed; every session of {name} has ended");
            }
            None if name == c.user() => {
                let password = read_password(&format!("new password for {name}: "))?;
                c.change_password(&password).await?;
                println!(
                    "password of {name} changed (the manager never saw it); every session of \
                     {name} has ended: log in again"
                );
            }
            None => {
                let passwd = calls::UserPasswd {
                    name: name.clone(),
                    public_key: None,
                };
                let made = c.call("/", passwd).await?;
                print_enrollment(&name, &made, false, "reset; every session has ended");
            }
        },
        UserCmd::Gateway { name, state } => {
            let on = state == "on";
            c.call(
                "/",
                calls::UserGateway {
                    name: name.clone(),
                    on,
                },
            )
            .await?;
            if on {
                println!("{name} may act for other users (never admins)");
            } else {
                println!("{name} no longer acts for others; the sessions it opened have ended");
            }
        }
        UserCmd::S3Key(S3KeyCmd::Create { user, json }) => {
            let made = c.call("/", calls::S3KeyCreate { user: user.clone() });
            let S3KeyMade {
                access_key_id,
                secret,
            } = made.await?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"access_key_id": access_key_id, "secret_access_key": secret.0})
                );
            } else {
                println!("access key id      {access_key_id}");
                println!("secret access key  {}", secret.0);
                eprintln!("(the secret is not shown again; nasd user s3-key revoke {user} {access_key_id} ends it)");
            }
        }
        UserCmd::S3Key(S3KeyCmd::List { user, json }) => {
            let keys = c.call("/", calls::S3KeyList { user }).await?;
            for (id, made_ms) in keys {
                if json {
                    println!(
                        "{}",
                        serde_json::json!({"access_key_id": id, "created_ms": made_ms})
                    );
                } else {
                    println!("{id}  made {} UTC", time_str(made_ms * 1000));
                }
            }
        }
        UserCmd::S3Key(S3KeyCmd::Revoke {
            user,
            access_key_id,
        }) => {
            c.call(
                "/",
                calls::S3KeyRevoke {
                    user,
                    access_key_id: access_key_id.clone(),
                },
            )
            .await?;
            println!("S3 key {access_key_id} revoked");
        }
        UserCmd::Fingerprint { name, json } => {
            crate::cmd_keys::fingerprint(&c, &name, json).await?
        }
        UserCmd::Verify { name, fingerprint } => {
            crate::cmd_keys::verify(&c, &name, &fingerprint).await?
        }
        UserCmd::ResetKeys { name } => crate::cmd_keys::reset_keys(&c, &name).await?,
        UserCmd::KeyLog { at } => crate::cmd_keys::key_log(&c, at).await?,
        UserCmd::List { json } => {
            let us = c.call("/", calls::UserList).await?;
            for u in us {
                if json {
                    println!(
                        "{}",
                        serde_json::json!({"name": u.name, "uid": u.uid, "admin": u.admin, "groups": u.groups})
                    );
                } else {
                    // Names stored before the name rule may hold anything: print them escaped.
                    let groups: Vec<_> = u.groups.iter().map(|g| shown(g)).collect();
                    println!(
                        "{:<16} uid {:<6} {}groups {}",
                        shown(&u.name),
                        u.uid,
                        if u.admin { "admin " } else { "" },
                        groups.join(",")
                    );
                }
            }
        }
    }
    Ok(())
}

/// Prints what `user add` or an admin's `user passwd` made: the enrollment code, if any.
fn print_enrollment(name: &str, made: &nasd_proto::manager::Enrollment, json: bool, what: &str) {
    if json {
        println!(
            "{}",
            serde_json::json!({
                "name": name,
                "uid": made.uid,
                "enrollment_code": made.code.as_ref().map(|c| c.0.clone()),
                "expires_ms": made.expires_ms,
            })
        );
        return;
    }
    match &made.code {
        Some(code) => {
            println!("user {name} {what}");
            println!("enrollment code    {}", code.0);
            eprintln!(
                "(shown once, valid until {} UTC: {name} runs `nasd user enroll {name} --code CODE` \
                 to set a password, which only {name}'s own client ever sees; after {name}'s \
                 first login, `nasd group sync` gives {name} the group keys)",
                time_str(made.expires_ms * 1000)
            );
        }
        None => println!("user {name} {what}"),
    }
}

/// `nasd user enroll NAME --code CODE`: sets NAME's password with the code, through OPAQUE.
async fn enroll(name: &str, code: &str) -> anyhow::Result<()> {
    let path = config_path()?;
    let cfg = ClientFile::load(&path)?;
    let password = read_password(&format!("new password for {name}: "))?;
    let session = SessionConfig {
        manager: cfg.manager.clone(),
        ca_der: cfg.read_ca()?,
        user: name.to_string(),
        credential: Credential::Password(password.into()),
        signing_key: None,
    };
    nasd_client::session::Session::enroll(&session, code).await?;
    println!(
        "{name} enrolled: the password is set (the manager never saw it); `nasd login --user \
         {name}` logs in and makes {name}'s keys"
    );
    Ok(())
}

/// `nasd user rotate-keys`: logs in with the password (whose login key seals the new seed)
/// and rotates.
async fn rotate_keys() -> anyhow::Result<()> {
    let path = config_path()?;
    let mut cfg = session_config(&path)?;
    if cfg.signing_key.is_some() {
        bail!(
            "{}: key users' end-to-end keys follow their login key (nasd user passwd --public-key)",
            cfg.user
        );
    }
    if !matches!(cfg.credential, Credential::Password(_)) || std::env::var("NASD_PASSWORD").is_err()
    {
        let p = prompt_secret(&format!("password for {}: ", cfg.user))?;
        cfg.credential = Credential::Password(p.into());
    }
    let cache = nasd_client::config::e2e_key_path(&path, &cfg.user);
    let c = Client::connect(cfg).await?;
    c.set_identity_source(nasd_client::e2e::keyring::IdentitySource::Login { cache: Some(cache) });
    let r = c.rotate_keys().await?;
    println!(
        "{}'s keys are now version {}: {} file(s) and {} group key(s) rewrapped to the new key; \
         the old seed opens nothing written from now on",
        c.user(),
        r.version,
        r.files,
        r.groups
    );
    Ok(())
}

pub async fn group(cmd: GroupCmd) -> anyhow::Result<()> {
    let c = connect().await?;
    match cmd {
        GroupCmd::Add { name } => {
            c.call("/", calls::GroupAdd { name: name.clone() }).await?;
            println!("group {name} added; its first member's client makes its key pair");
        }
        GroupCmd::Member {
            group,
            user,
            remove: true,
        } => {
            let remove = calls::GroupMemberRemove {
                group: group.clone(),
                user: user.clone(),
            };
            c.call("/", remove).await?;
            println!(
                "{user} is no longer a member of {group}; the group's next writer among its                  members makes it a new key pair (or a member's nasd group sync)"
            );
        }
        GroupCmd::Member {
            group,
            user,
            remove: false,
        } => {
            let add = calls::GroupMember {
                group: group.clone(),
                user: user.clone(),
            };
            c.call("/", add).await?;
            let done = c.sync_group_keys(vec![group.clone()]).await?;
            println!("{user} is now a member of {group}");
            if done.wraps == 0 {
                println!(
                    "{user} gets a wrap of {group}'s key from a member's client that holds it                      (nasd group sync {group} as a member, or at a member's next use of the                      group), once {user} has keys"
                );
            }
        }
        GroupCmd::Sync { mut groups } => {
            if groups.is_empty() {
                let me = c.user();
                let us = c.call("/", calls::UserList).await?;
                groups = us
                    .into_iter()
                    .filter(|u| u.name == me)
                    .flat_map(|u| u.groups)
                    .collect();
                groups.sort();
                groups.dedup();
            }
            let done = c.sync_group_keys(groups).await?;
            println!("{} wrap(s) of group keys made", done.wraps);
            for g in &done.key_pairs {
                println!("{g}: new key pair made");
            }
            for g in &done.waiting {
                println!("{g}: you hold no wrap of its key yet; a member who does gives you one");
            }
            for g in &done.not_member {
                println!("{g}: not a member; its members' clients make and wrap its keys");
            }
        }
    }
    Ok(())
}

/// Logs in with a password, or with `key` (an Ed25519 secret key file) by signing the
/// manager's challenge, and saves the session token (mode 0600) beside the config; later
/// commands use it until it expires (the manager's `session_ttl_ms`, 12 h by default), until
/// `nasd logout`, or until the user's password or key changes. Also makes USER the config's
/// user.
pub async fn login(
    user: Option<String>,
    key: Option<PathBuf>,
    legacy_password: bool,
) -> anyhow::Result<()> {
    let path = config_path()?;
    let mut cfg = ClientFile::load(&path)?;
    let user = user.unwrap_or_else(|| cfg.user.clone());
    let (password, signing_key) = match key {
        Some(k) => (
            zeroize::Zeroizing::new(String::new()),
            Some(nasd_client::userkey::read_secret(&k)?),
        ),
        None => match std::env::var("NASD_PASSWORD") {
            Ok(p) => (zeroize::Zeroizing::new(p), None),
            Err(_) => (
                zeroize::Zeroizing::new(prompt_secret(&format!("password for {user}: "))?),
                None,
            ),
        },
    };
    let ca_der = cfg.read_ca()?;
    let session = SessionConfig {
        manager: cfg.manager.clone(),
        ca_der,
        user: user.clone(),
        credential: Credential::Password(password.as_str().into()),
        signing_key,
    };
    if legacy_password {
        migrate_legacy(&path, &session, &password).await?;
    }
    let c = match Client::connect(session).await {
        Ok(c) => c,
        Err(e) if e.status() == Some(MgrStatus::WrongPassword) => bail!(
            "{e} (an account made before manager protocol 15 logs in once with `nasd login \
             --legacy-password`, which moves it to OPAQUE)"
        ),
        Err(e) => return Err(e.into()),
    };
    // The end-to-end key: unsealed (or made) now, kept beside the token for later commands.
    c.set_identity_source(nasd_client::e2e::keyring::IdentitySource::Login {
        cache: Some(nasd_client::config::e2e_key_path(&path, &user)),
    });
    c.identity().await?;
    let (token, expires_ms) = c.token().await.context("no session")?;
    nasd_client::config::save_token(&path, &user, &token)?;
    if cfg.user != user {
        cfg.switch_user(&user);
        cfg.save(&path)?;
    }
    let left_h = expires_ms.saturating_sub(nasd_drive::now_us() / 1000) / 3_600_000;
    println!("logged in as {user}; the session lasts {left_h} h");
    Ok(())
}

/// Moves an account made before manager protocol 15 to OPAQUE: one last login with the
/// password itself, checked against the manager's old hash, then a registration from that
/// session that replaces the hash with a password file and reseals the user's seed.
async fn migrate_legacy(
    config: &Path,
    session: &SessionConfig,
    password: &str,
) -> anyhow::Result<()> {
    let legacy = SessionConfig {
        credential: Credential::LegacyPassword(password.into()),
        ..session.clone()
    };
    let c = Client::connect(legacy).await?;
    c.set_identity_source(nasd_client::e2e::keyring::IdentitySource::Login {
        cache: Some(nasd_client::config::e2e_key_path(config, &session.user)),
    });
    c.change_password(password).await?;
    eprintln!(
        "{}: moved to OPAQUE; the manager no longer holds a hash of the password. Its \
         end-to-end key may have been made by an admin's client: `nasd user rotate-keys` makes \
         one only you hold",
        session.user
    );
    Ok(())
}

/// Ends the session `nasd login` saved for USER (default: `$NASD_USER`, else the config's
/// user) on the manager, so its token logs in nowhere again, and deletes the token file. The
/// file goes even when the manager cannot be reached, but then the command fails and says that
/// the session lives on the manager until it expires.
pub async fn logout(user: Option<String>) -> anyhow::Result<()> {
    let path = config_path()?;
    let cfg = ClientFile::load(&path)?;
    let user = user
        .or_else(|| std::env::var("NASD_USER").ok())
        .unwrap_or_else(|| cfg.user.clone());
    let Some(token) = saved_token(&path, &user) else {
        bail!(
            "no saved session for {user} ({} is missing or unreadable)",
            token_path(&path, &user).display()
        );
    };
    let ca_der = cfg.read_ca()?;
    let session = nasd_client::session::Session::connect(&SessionConfig {
        manager: cfg.manager.clone(),
        ca_der,
        user: user.clone(),
        credential: Credential::Token(token),
        signing_key: None,
    })
    .await;
    let ended = match session {
        Ok(s) => s.logout().await,
        Err(e) if e.status() == Some(MgrStatus::SessionExpired) => Ok(()),
        Err(e) => Err(e),
    };
    let tp = token_path(&path, &user);
    std::fs::remove_file(&tp).with_context(|| format!("removing {}", tp.display()))?;
    if let Err(e) = ended {
        bail!("{e}; the token file is deleted, but the session stays valid on the manager until it expires");
    }
    println!("logged out {user}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lflag(fd: i32) -> libc::tcflag_t {
        // SAFETY: plain data filled by tcgetattr.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::tcgetattr(fd, &mut t) }, 0);
        t.c_lflag
    }

    #[test]
    fn echo_is_off_while_a_secret_is_read_and_restored_after() {
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty writes two descriptors; the null pointers ask for defaults.
        let r = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
        assert_ne!(lflag(slave) & libc::ECHO, 0, "a new terminal echoes");
        let during = with_echo_off(slave, || lflag(slave)).unwrap();
        assert_eq!(during & libc::ECHO, 0, "echo still on while reading");
        assert_ne!(lflag(slave) & libc::ECHO, 0, "echo not restored");
        // Not a terminal: refused, nothing changed.
        let f = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsRawFd;
        assert!(with_echo_off(f.as_raw_fd(), || ()).is_err());
        // SAFETY: closing the descriptors openpty gave us.
        unsafe {
            libc::close(master);
            libc::close(slave);
        }
    }

    #[test]
    fn mtimes_parse_from_seconds() {
        assert_eq!(mtime_us(Some(1.5)).unwrap(), 1_500_000);
        assert!(mtime_us(Some(-1.0)).is_err());
        assert!(mtime_us(Some(f64::NAN)).is_err());
        assert!(mtime_us(None).unwrap() > 1_600_000_000_000_000);
    }
}
