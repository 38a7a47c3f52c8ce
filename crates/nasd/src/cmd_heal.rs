//! Layouts and healing from the command line: `nasd layout get|set`, `nasd scrub`,
//! `nasd status` and `nasd drive replace`. The work happens in the manager's striping layer
//! (crates/nasd-manager/src/heal.rs); these commands ask for it and show what it reports.

use crate::cmd_fs::{connect, remote};
use anyhow::{bail, Context};
use clap::Subcommand;
use nasd_client::files::Client;
use nasd_proto::manager::calls;
use nasd_proto::manager::{ClusterStatus, DriveCount, FileCounts, FileKind, ScrubReport};
use nasd_proto::DriveId;
use std::sync::Arc;
use std::time::Duration;

/// How often `nasd drive replace` asks for progress.
const PROGRESS_POLL_MS: u64 = 500;

#[derive(Subcommand, Debug)]
pub enum LayoutCmd {
    /// The layout new files under a directory get (its own, or inherited).
    Get { path: String },
    /// Set the layout new files under a directory get: single, raid0:N, mirror:N, rs:K+M,
    /// raid6x:K (optionally /UNIT, e.g. rs:4+2/64K); "inherit" clears the directory's own.
    Set { path: String, layout: String },
}

pub async fn layout(cmd: LayoutCmd) -> anyhow::Result<()> {
    let c = connect().await?;
    match cmd {
        LayoutCmd::Get { path } => println!("{}", c.layout_get(&remote(&path)?).await?),
        LayoutCmd::Set { path, layout } => {
            let spec = if layout == "inherit" { "" } else { &layout };
            c.layout_set(&remote(&path)?, spec).await?;
        }
    }
    Ok(())
}

/// `nasd mkdir --layout L`: the directories just made take layout `spec`.
pub async fn set_layouts(paths: &[String], spec: &str) -> anyhow::Result<()> {
    let c = connect().await?;
    for p in paths {
        c.layout_set(&remote(p)?, spec).await?;
    }
    Ok(())
}

async fn scrub_one(c: &Arc<Client>, path: &str, repair: bool) -> anyhow::Result<ScrubReport> {
    let scrub = calls::Scrub {
        path: path.to_string(),
        repair,
    };
    Ok(c.call(path, scrub).await?)
}

/// Every file at or under `path`, depth first.
async fn files_under(c: &Arc<Client>, path: &str) -> anyhow::Result<Vec<String>> {
    let mut out = vec![];
    let mut todo = vec![path.to_string()];
    while let Some(p) = todo.pop() {
        let st = c.stat(&p).await?;
        if st.kind != FileKind::Dir {
            out.push(p);
            continue;
        }
        let mut entries = c.list(&p).await?;
        entries.sort_by(|a, b| b.name.cmp(&a.name));
        for e in entries {
            let child = if p == "/" {
                format!("/{}", e.name)
            } else {
                format!("{p}/{}", e.name)
            };
            todo.push(child);
        }
    }
    Ok(out)
}

fn report_json(r: &ScrubReport) -> serde_json::Value {
    serde_json::json!({
        "path": r.path, "layout": r.geometry, "bytes_checked": r.bytes_checked,
        "groups": r.groups, "damaged": r.damaged, "repaired": r.repaired,
        "rebuilt": r.rebuilt, "unrecoverable": r.unrecoverable, "unchecked": r.unchecked,
        "detail": r.detail,
    })
}

/// A file is whole after the scrub if everything was checked and nothing is left damaged.
fn whole(r: &ScrubReport) -> bool {
    r.unrecoverable == 0 && r.unchecked == 0 && r.damaged == r.repaired
}

pub async fn scrub(path: Option<String>, repair: bool, json: bool) -> anyhow::Result<()> {
    let c = connect().await?;
    let root = remote(path.as_deref().unwrap_or("/"))?;
    let files = files_under(&c, &root).await?;
    let mut total = ScrubReport::default();
    let mut sick = 0u64;
    for f in &files {
        let r = match scrub_one(&c, f, repair).await {
            Ok(r) => r,
            Err(e) => ScrubReport {
                path: f.clone(),
                unchecked: 1,
                detail: format!("not scrubbed: {e:#}"),
                ..ScrubReport::default()
            },
        };
        total.bytes_checked += r.bytes_checked;
        total.groups += r.groups;
        total.damaged += r.damaged;
        total.repaired += r.repaired;
        total.rebuilt += r.rebuilt;
        total.unrecoverable += r.unrecoverable;
        total.unchecked += r.unchecked;
        if !whole(&r) {
            sick += 1;
        }
        if json {
            println!("{}", report_json(&r));
        } else {
            let state = if r.unrecoverable > 0 || r.damaged > r.repaired {
                "DAMAGED"
            } else if r.unchecked > 0 {
                "DEGRADED"
            } else if r.damaged + r.rebuilt > 0 {
                "repaired"
            } else {
                "ok"
            };
            println!(
                "{state:<8} {} ({}, {} bytes, {} groups{}){}{}",
                r.path,
                r.geometry,
                r.bytes_checked,
                r.groups,
                if r.damaged + r.rebuilt > 0 {
                    format!(
                        "; damaged {}, repaired {}, rebuilt {}",
                        r.damaged, r.repaired, r.rebuilt
                    )
                } else {
                    String::new()
                },
                if r.detail.is_empty() { "" } else { ": " },
                r.detail
            );
        }
    }
    if json {
        total.path = root.clone();
        let mut t = report_json(&total);
        t["files"] = files.len().into();
        t["files_not_whole"] = sick.into();
        println!("{}", serde_json::json!({ "total": t }));
    } else {
        println!(
            "scrubbed {} file(s), {} bytes: damaged {}, repaired {}, rebuilt {}, not whole {}",
            files.len(),
            total.bytes_checked,
            total.damaged,
            total.repaired,
            total.rebuilt,
            sick
        );
    }
    if sick > 0 {
        bail!(
            "{sick} file(s) are not whole{}",
            if repair {
                ""
            } else {
                " (nasd scrub --repair rewrites what the codes cover)"
            }
        );
    }
    Ok(())
}

async fn cluster_status(c: &Arc<Client>) -> anyhow::Result<ClusterStatus> {
    Ok(c.call("/", calls::Status { recount: false }).await?)
}

/// Whether the counts the manager kept are those a walk found.
fn agreed(s: &ClusterStatus, walked: &FileCounts) -> bool {
    let kept = FileCounts {
        files: s.files,
        stale_files: s.stale_files,
        stale_components: s.stale_components,
        bytes: s.bytes,
        stale_bytes: s.stale_bytes,
        drives: s
            .drives
            .iter()
            .filter(|d| d.files > 0 || d.stale > 0)
            .map(|d| DriveCount {
                drive: d.drive,
                files: d.files,
                stale: d.stale,
            })
            .collect(),
    };
    kept == *walked
}

fn counts_json(c: &FileCounts) -> serde_json::Value {
    let drives: Vec<_> = c
        .drives
        .iter()
        .map(|d| {
            serde_json::json!({"drive": format!("{:016x}", d.drive.0), "files": d.files,
                "stale": d.stale})
        })
        .collect();
    serde_json::json!({"files": c.files, "stale_files": c.stale_files,
        "stale_components": c.stale_components, "bytes": c.bytes, "stale_bytes": c.stale_bytes,
        "drives": drives})
}

fn status_json(s: &ClusterStatus) -> serde_json::Value {
    let drives: Vec<_> = s
        .drives
        .iter()
        .map(|d| {
            serde_json::json!({"drive": format!("{:016x}", d.drive.0), "addr": d.addr,
                "healthy": d.healthy, "files": d.files, "detail": d.detail, "stale": d.stale,
                "capacity_bytes": d.capacity_bytes, "used_bytes": d.used_bytes})
        })
        .collect();
    let rebuild = s.rebuild.as_ref().map(|r| {
        serde_json::json!({"old": format!("{:016x}", r.old.0), "new": format!("{:016x}", r.new.0),
            "files_done": r.files_done, "files_total": r.files_total, "bytes_done": r.bytes_done,
            "failed": r.failed, "finished": r.finished, "detail": r.detail})
    });
    let recount = s.recounted.as_ref().map(|c| {
        let mut v = counts_json(c);
        v["agreed"] = agreed(s, c).into();
        v
    });
    serde_json::json!({
        "drives": drives, "files": s.files, "degraded_files": s.degraded_files,
        "degraded": s.degraded, "rebuild": rebuild,
        "stale_files": s.stale_files, "stale_components": s.stale_components,
        "bytes": s.bytes, "stale_bytes": s.stale_bytes, "recount": recount,
        "scrub": {"passes": s.scrub.passes, "files": s.scrub.files, "bytes": s.scrub.bytes,
            "damaged": s.scrub.damaged, "repaired": s.scrub.repaired,
            "last_pass_ms": s.scrub.last_pass_ms, "rate_bytes_per_s": s.scrub.rate_bytes_per_s},
    })
}

pub async fn status(json: bool, recount: bool) -> anyhow::Result<()> {
    let c = connect().await?;
    let s: ClusterStatus = c.call("/", calls::Status { recount }).await?;
    if json {
        println!("{}", status_json(&s));
        return Ok(());
    }
    println!("drives:");
    for d in &s.drives {
        println!(
            "  {:016x} {:<22} {:<8} files {:<8} stale {:<6} {}",
            d.drive.0,
            d.addr,
            if d.healthy { "healthy" } else { "DOWN" },
            d.files,
            d.stale,
            d.detail
        );
    }
    println!(
        "files: {}, degraded: {}, with stale components: {} ({} components, {} of {} bytes)",
        s.files, s.degraded_files, s.stale_files, s.stale_components, s.stale_bytes, s.bytes
    );
    for p in &s.degraded {
        println!("  degraded {p}");
    }
    if s.degraded_files > s.degraded.len() as u64 {
        println!(
            "  … and {} more",
            s.degraded_files - s.degraded.len() as u64
        );
    }
    if let Some(w) = &s.recounted {
        println!(
            "recount: {} files, {} with stale components ({} components), {} bytes: {}",
            w.files,
            w.stale_files,
            w.stale_components,
            w.bytes,
            if agreed(&s, w) {
                "the kept counts agree"
            } else {
                "the kept counts DIFFERED (the manager keeps the walked ones now)"
            }
        );
    }
    if let Some(r) = &s.rebuild {
        println!(
            "drive replacement {:016x} -> {:016x}: {}/{} files, {} bytes, {} failed{}{}",
            r.old.0,
            r.new.0,
            r.files_done,
            r.files_total,
            r.bytes_done,
            r.failed,
            if r.finished {
                ", finished"
            } else {
                ", running"
            },
            if r.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", r.detail)
            }
        );
    }
    let sc = &s.scrub;
    if sc.rate_bytes_per_s == 0 {
        println!("background scrub: off");
    } else {
        println!(
            "background scrub: {} pass(es), this pass {} files {} bytes, damaged {}, repaired {} ({} MiB/s)",
            sc.passes,
            sc.files,
            sc.bytes,
            sc.damaged,
            sc.repaired,
            sc.rate_bytes_per_s >> 20
        );
    }
    Ok(())
}

/// A drive named by its id (hex, as `nasd status` prints it) or its address.
fn drive_named(s: &ClusterStatus, name: &str) -> anyhow::Result<DriveId> {
    if let Some(d) = s.drives.iter().find(|d| d.addr == name) {
        return Ok(d.drive);
    }
    let id = u64::from_str_radix(name.trim_start_matches("0x"), 16)
        .with_context(|| format!("{name}: not a drive id (hex) or a drive address"))?;
    match s.drives.iter().find(|d| d.drive.0 == id) {
        Some(d) => Ok(d.drive),
        None => bail!("{name}: no such drive (nasd status lists them)"),
    }
}

pub async fn drive_replace(old: String, new: String, no_wait: bool) -> anyhow::Result<()> {
    let c = connect().await?;
    let s = cluster_status(&c).await?;
    let (old, new) = (drive_named(&s, &old)?, drive_named(&s, &new)?);
    c.call("/", calls::DriveReplace { old, new }).await?;
    if no_wait {
        println!("drive replacement started; nasd status shows its progress");
        return Ok(());
    }
    use std::io::Write as _;
    loop {
        let s = cluster_status(&c).await?;
        let Some(r) = s.rebuild else {
            bail!("the manager reports no drive replacement (did it restart?)");
        };
        let frac = if r.files_total == 0 {
            1.0
        } else {
            r.files_done as f64 / r.files_total as f64
        };
        let bar = (frac * 30.0).round() as usize;
        eprint!(
            "\r[{}{}] {}/{} files, {:.1} MiB{}",
            "#".repeat(bar),
            " ".repeat(30 - bar.min(30)),
            r.files_done,
            r.files_total,
            r.bytes_done as f64 / (1 << 20) as f64,
            if r.failed > 0 {
                format!(", {} failed", r.failed)
            } else {
                String::new()
            }
        );
        std::io::stderr().flush().ok();
        if r.finished {
            eprintln!();
            if r.failed > 0 {
                bail!(
                    "{} file(s) still have a component on {:016x}: {}",
                    r.failed,
                    r.old.0,
                    r.detail
                );
            }
            println!(
                "drive {:016x} replaced by {:016x}: {} file(s), {} bytes rebuilt",
                r.old.0, r.new.0, r.files_done, r.bytes_done
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(PROGRESS_POLL_MS)).await;
    }
}
