//! The first start in a directory: initializes each drive (`drive-N/`) and the manager
//! (`manager/`, and with `--managers N` the others, `manager-1/`..., joined to its
//! PostgreSQL database) in place, picks their loopback addresses (and their metrics servers'),
//! makes the admin's password, and
//! writes `cluster.json` and the admin's `client.json`. Everything is private (0700
//! directories, 0600 files) whatever the umask: it holds keys, the password and the data.

use crate::error::ClusterError;
use crate::node::{ClusterFile, Node, NodeId, CLUSTER_FILE_VERSION};
use crate::ports::{free_addrs, free_addrs_avoiding};
use crate::postgres::{self, Meta};
use crate::{Options, DRIVES_MAX, MANAGERS_MAX};
use nasd_client::config::{ClientFile, CLIENT_CONFIG_VERSION};
use nasd_client::managers::ManagerAddrs;
use std::path::Path;

/// The admin user `init` creates.
pub const ADMIN_USER: &str = "admin";
/// Random bytes of the admin's password (printed as hex).
const ADMIN_PASSWORD_BYTES: usize = 16;

/// The layout a new cluster of `drives` drives gives files by default: one that survives two
/// lost drives wherever there are enough drives for it (K as large as the drives allow, up to
/// 4, so parity costs at most half the data), else today's one object per file.
pub fn default_layout_for(drives: usize) -> &'static str {
    match drives {
        0..=3 => "single",
        4 => "rs:2+2",
        5 => "rs:3+2",
        _ => "rs:4+2",
    }
}

/// Names the manager's certificate needs beside loopback (which it always carries): the host
/// of its address when that is not loopback, so clients elsewhere can check it.
fn cert_names(addr: &str) -> Vec<String> {
    match addr.parse::<std::net::SocketAddr>() {
        Ok(a) if a.ip().is_loopback() => vec![],
        Ok(a) => vec![a.ip().to_string()],
        Err(_) => vec![],
    }
}

/// Initializes a cluster of `o.drives` drives and `o.managers` managers in `dir` (which
/// exists and is private).
pub fn init(dir: &Path, o: &Options) -> Result<ClusterFile, ClusterError> {
    if o.drives == 0 || o.drives > DRIVES_MAX {
        return Err(ClusterError::DriveCount { drives: o.drives });
    }
    let managers = o.managers.max(1);
    if managers > MANAGERS_MAX
        || (managers > 1 && (o.meta == Meta::Sqlite || !o.placement.addrs.is_empty()))
    {
        return Err(ClusterError::ManagerCount { managers });
    }
    // One address per drive, then the managers'.
    // Metrics on loopback only when the components are (a placement's namespaces have
    // addresses of their own). All loopback ports are drawn in one call, so none repeats.
    let n = o.drives + managers;
    let mut metrics: Vec<Option<String>> = vec![None; n];
    let mut addrs = if o.placement.addrs.is_empty() {
        let mut all = free_addrs(2 * n)?;
        metrics = all.split_off(n).into_iter().map(Some).collect();
        all
    } else if o.placement.addrs.len() == o.drives + 1 {
        o.placement.addrs.clone()
    } else {
        return Err(ClusterError::PlacementAddrs {
            drives: o.drives,
            addrs: o.placement.addrs.len(),
        });
    };
    let mut managers: Vec<Node> = addrs
        .split_off(o.drives)
        .into_iter()
        .zip(metrics.split_off(o.drives))
        .enumerate()
        .map(|(i, (addr, metrics))| {
            let name = match i {
                0 => NodeId::Manager,
                i => NodeId::ManagerN(i),
            }
            .to_string();
            Node {
                dir: dir.join(&name),
                name,
                addr,
                metrics,
            }
        })
        .collect();
    let mut drives = vec![];
    for (i, (addr, metrics)) in addrs.into_iter().zip(metrics).enumerate() {
        let id = NodeId::Drive(i);
        let d = dir.join(id.to_string());
        let mut init = nasd_drive::InitOptions::new(&d);
        init.capacity_bytes = o.drive_capacity_bytes;
        nasd_drive::init(&init).map_err(|source| ClusterError::DriveInit {
            dir: d.clone(),
            source,
        })?;
        drives.push(Node {
            name: id.to_string(),
            dir: d,
            addr,
            metrics,
        });
    }
    let mut pw = [0u8; ADMIN_PASSWORD_BYTES];
    nasd_crypto::random_bytes(&mut pw);
    let password = hex::encode(pw);
    let pw_file = dir.join("admin.password");
    nasd_private::write_file(&pw_file, password.as_bytes())?;
    let first = managers.remove(0);
    let meta = match &o.meta {
        Meta::Sqlite => nasd_manager::setup::Meta::Sqlite,
        Meta::Postgres(c) => nasd_manager::setup::Meta::Postgres(c.clone()),
        Meta::PrivatePostgres => nasd_manager::setup::Meta::Postgres(postgres::start(dir)?),
    };
    nasd_manager::setup::init(&nasd_manager::setup::InitOptions {
        dir: first.dir.clone(),
        listen: first.addr.clone(),
        admin_user: ADMIN_USER.into(),
        admin_password: password,
        names: cert_names(&first.addr),
        policy: nasd_manager::service::Policy {
            default_layout: default_layout_for(o.drives).into(),
            ..Default::default()
        },
        meta,
    })
    .map_err(|source| ClusterError::ManagerInit {
        dir: first.dir.clone(),
        source,
    })?;
    for m in &managers {
        nasd_manager::setup::join(&first.dir, &m.dir, &m.addr, &cert_names(&m.addr)).map_err(
            |source| ClusterError::ManagerInit {
                dir: m.dir.clone(),
                source,
            },
        )?;
    }
    let info = ClusterFile {
        version: CLUSTER_FILE_VERSION,
        manager: first,
        drives,
        more_managers: managers,
    };
    let text = serde_json::to_string_pretty(&info).expect("cluster.json serializes") + "\n";
    nasd_private::write_file(&ClusterFile::path(dir), text.as_bytes())?;
    ClientFile {
        version: CLIENT_CONFIG_VERSION,
        manager: ManagerAddrs::new(info.manager_addrs()),
        ca: info.manager.dir.join("tls/ca.der"),
        user: ADMIN_USER.into(),
        password_file: Some(pw_file),
        password_user: Some(ADMIN_USER.into()),
    }
    .save(&dir.join("client.json"))?;
    Ok(info)
}

/// A cluster made before its components served metrics gets metrics addresses (free
/// loopback ports) at its next start, recorded in `cluster.json`; one placed elsewhere, or
/// that has them, is returned as it is.
pub fn add_metrics(
    dir: &Path,
    mut info: ClusterFile,
    o: &Options,
) -> Result<ClusterFile, ClusterError> {
    let missing = std::iter::once(&info.manager)
        .chain(&info.drives)
        .chain(&info.more_managers)
        .filter(|n| n.metrics.is_none())
        .count();
    if missing == 0 || !o.placement.addrs.is_empty() || !o.placement.wrappers.is_empty() {
        return Ok(info);
    }
    let taken: Vec<&str> = std::iter::once(&info.manager)
        .chain(&info.drives)
        .chain(&info.more_managers)
        .flat_map(|n| std::iter::once(&n.addr).chain(&n.metrics))
        .map(String::as_str)
        .collect();
    let mut free = free_addrs_avoiding(missing, &taken)?.into_iter();
    for n in std::iter::once(&mut info.manager)
        .chain(info.drives.iter_mut())
        .chain(info.more_managers.iter_mut())
    {
        if n.metrics.is_none() {
            n.metrics = free.next();
        }
    }
    let text = serde_json::to_string_pretty(&info).expect("cluster.json serializes") + "\n";
    nasd_private::write_file(&ClusterFile::path(dir), text.as_bytes())?;
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manager_off_loopback_has_its_address_in_its_certificate() {
        assert!(cert_names("127.0.0.1:7000").is_empty());
        assert_eq!(cert_names("10.213.0.2:7000"), vec!["10.213.0.2"]);
        assert_eq!(cert_names("[fd00::2]:7000"), vec!["fd00::2"]);
    }
}
