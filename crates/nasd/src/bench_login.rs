//! `nasd bench login`: how long a password login takes against the current cluster (the one
//! later commands reach), end to end — TCP, the TLS 1.3 handshake, OPAQUE's three messages with
//! the client's Argon2id run — and that Argon2id run alone (the cost of one offline guess for
//! whoever holds the manager's database and its OPAQUE key file).

use anyhow::Context as _;
use clap::Args;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct BenchLoginArgs {
    /// Logins to time (the first is not counted: it warms the connection path).
    #[arg(long, default_value_t = 20)]
    pub rounds: usize,
    /// Log in as this user (with $NASD_PASSWORD, or the config's password file for its own
    /// user); default the config's user.
    #[arg(long)]
    pub user: Option<String>,
    /// One JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The median, 90th percentile and largest of `ms` (sorted here).
fn summary(ms: &mut [f64]) -> (f64, f64, f64) {
    ms.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9), ms[ms.len() - 1])
}

pub fn run(a: BenchLoginArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.rounds >= 1, "--rounds: at least 1");
    let path = crate::cmd_fs::config_path()?;
    let mut cfg = crate::cmd_fs::session_config(&path)?;
    if let Some(u) = &a.user {
        cfg.user = u.clone();
    }
    anyhow::ensure!(
        matches!(cfg.credential, nasd_proto::manager::Credential::Password(_)),
        "bench login needs a password ($NASD_PASSWORD, or the config's password file)"
    );
    let rt = crate::runtime()?;
    let mut logins = vec![];
    for i in 0..=a.rounds {
        let t = Instant::now();
        let s = rt
            .block_on(nasd_client::session::Session::connect(&cfg))
            .context("logging in")?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        drop(s);
        if i > 0 {
            logins.push(ms);
        }
    }
    let ksf = nasd_client::opaque::ksf();
    let mut ksf_ms = vec![];
    for _ in 0..a.rounds.clamp(1, 10) {
        let mut out = [0u8; 64];
        let t = Instant::now();
        ksf.hash_password_into(&[7u8; 64], &[0u8; 16], &mut out)
            .map_err(|e| anyhow::anyhow!("argon2: {e}"))?;
        ksf_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (l50, l90, lmax) = summary(&mut logins);
    let (k50, _, _) = summary(&mut ksf_ms);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "rounds": a.rounds,
                "login_ms_median": l50, "login_ms_p90": l90, "login_ms_max": lmax,
                "ksf_ms_median": k50,
                "ksf": {"algorithm": "argon2id", "memory_kib": nasd_client::opaque::KSF_MEMORY_KIB,
                        "iterations": nasd_client::opaque::KSF_ITERATIONS,
                        "parallelism": nasd_client::opaque::KSF_PARALLELISM},
                "cpu": cpu, "cores": cores,
            })
        );
    } else {
        println!(
            "password login (TCP, TLS 1.3, OPAQUE KE1/KE2/KE3), {} rounds:",
            a.rounds
        );
        println!("  median {l50:.1} ms   p90 {l90:.1} ms   max {lmax:.1} ms");
        println!(
            "Argon2id alone (m={} KiB, t={}, p={}; one offline guess with database and key file): {k50:.1} ms",
            nasd_client::opaque::KSF_MEMORY_KIB,
            nasd_client::opaque::KSF_ITERATIONS,
            nasd_client::opaque::KSF_PARALLELISM
        );
        println!("CPU: {cpu} ({cores} cores)");
    }
    Ok(())
}
