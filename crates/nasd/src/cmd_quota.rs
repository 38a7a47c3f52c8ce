//! `nasd quota set USER BYTES|none` (admins) and `nasd quota show [USER] [--json]`: per-user
//! quotas on the bytes of files a user owns (seed 002 §3.2; the manager's
//! `nasd_manager::quota` says what counts and how writes are escrowed against them).

use crate::cmd_fs::connect;
use clap::Subcommand;
use nasd_client::files::FsError;
use nasd_manager::quota::human;
use nasd_proto::manager::QuotaInfo;

#[derive(Subcommand, Debug)]
pub enum QuotaCmd {
    /// Set USER's quota to BYTES (suffixes K, M, G, T; binary) of files they own, or remove
    /// it (`none`). Admins only. Setting one counts the user's files.
    Set {
        user: String,
        /// BYTES, or `none`.
        #[arg(value_parser = limit)]
        limit: Limit,
    },
    /// Show USER's quota (your own by default; anyone's, or with no USER every one, for an
    /// admin): limit, bytes used, and bytes escrowed by writes in flight.
    Show {
        user: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

/// A quota's limit as the command line gives it.
#[derive(Clone, Copy, Debug)]
pub struct Limit(Option<u64>);

fn limit(s: &str) -> Result<Limit, String> {
    match s {
        "none" => Ok(Limit(None)),
        s => crate::parse::bytes(s).map(|b| Limit(Some(b))),
    }
}

/// A manager refusal as "quota set: disk quota exceeded (...)", without a path prefix.
fn plain(e: FsError) -> anyhow::Error {
    match e {
        FsError::Manager { error, .. } => anyhow::anyhow!("{error}"),
        e => e.into(),
    }
}

pub async fn run(cmd: QuotaCmd) -> anyhow::Result<()> {
    let c = connect().await?;
    match cmd {
        QuotaCmd::Set { user, limit } => {
            let q = c.quota_set(&user, limit.0).await.map_err(plain)?;
            match q.first() {
                Some(q) => outln!("{}", line(q)),
                None => outln!("{user}: no quota"),
            }
        }
        QuotaCmd::Show { user, json } => {
            // Without a name an admin sees every quota, anyone else their own.
            let who = user.clone().unwrap_or_default();
            let qs = c.quota_get(&who).await.map_err(plain)?;
            if json {
                let v: Vec<serde_json::Value> = qs.iter().map(to_json).collect();
                outln!("{}", serde_json::Value::Array(v));
            } else if qs.is_empty() {
                outln!("{}: no quota", user.as_deref().unwrap_or(c.user()));
            } else {
                for q in &qs {
                    outln!("{}", line(q));
                }
            }
        }
    }
    Ok(())
}

fn line(q: &QuotaInfo) -> String {
    format!(
        "{}: limit {}, used {}, escrowed {}",
        nasd_client::escape::shown(&q.user),
        human(q.limit),
        human(q.used),
        human(q.escrowed)
    )
}

fn to_json(q: &QuotaInfo) -> serde_json::Value {
    serde_json::json!({
        "user": q.user,
        "uid": q.uid,
        "limit": q.limit,
        "used": q.used,
        "escrowed": q.escrowed,
    })
}
