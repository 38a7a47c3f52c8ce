//! The components of a cluster and the two files that describe it: `cluster.json` (written
//! once, at the first start: each component's directory and fixed loopback address) and
//! `pids.json` (the processes running now). Components are named on disk as they are in
//! logs and messages: `manager`, `drive-0`, `drive-1`, ..., and a cluster's further managers
//! (`nasd up --managers N`) `manager-1`, `manager-2`, ...
//!
//! ```text
//! cluster.json  {"version": 1, "manager": NODE, "drives": [NODE, ...],
//!                "more_managers": [NODE, ...]}   (more_managers: absent with one manager)
//!               NODE = {"name": "drive-0", "dir": "/abs/DATA/drive-0", "addr": "127.0.0.1:PORT",
//!                       "metrics": "127.0.0.1:PORT"}   (metrics: absent when placed elsewhere)
//! pids.json     {"pids": [["drive-0", 4242], ..., ["manager", 4250]]}
//! ```

use crate::error::ClusterError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The version of `cluster.json` this code writes and reads.
pub const CLUSTER_FILE_VERSION: u32 = 1;

/// One component of a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeId {
    /// The cluster's first manager.
    Manager,
    /// The drive with this index (`drive-N`), counted from 0.
    Drive(usize),
    /// A further manager (`manager-N`, N from 1) over the first one's database.
    ManagerN(usize),
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeId::Manager => f.write_str("manager"),
            NodeId::Drive(i) => write!(f, "drive-{i}"),
            NodeId::ManagerN(i) => write!(f, "manager-{i}"),
        }
    }
}

impl std::str::FromStr for NodeId {
    type Err = String;
    fn from_str(s: &str) -> Result<NodeId, String> {
        if s == "manager" {
            return Ok(NodeId::Manager);
        }
        // Only the canonical spelling `drive-N` (digits, no leading zero), so one component
        // has one name.
        let canonical = |n: &&str| {
            !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (*n == "0" || !n.starts_with('0'))
        };
        let numbered = |prefix: &str| {
            s.strip_prefix(prefix)
                .filter(canonical)
                .and_then(|n| n.parse::<usize>().ok())
        };
        numbered("drive-")
            .map(NodeId::Drive)
            .or_else(|| {
                numbered("manager-")
                    .filter(|&i| i > 0)
                    .map(NodeId::ManagerN)
            })
            .ok_or_else(|| format!("{s:?}: not a component name (manager, manager-N, drive-N)"))
    }
}

/// A component as `cluster.json` records it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `manager` or `drive-N` ([`NodeId`]'s display form).
    pub name: String,
    /// Its data directory (a drive's holds `data.blk`, `meta.redb` and `keys/`).
    pub dir: PathBuf,
    /// The loopback address it serves on, fixed for the cluster's life.
    pub addr: String,
    /// Where it serves its metrics and health check (`--metrics`, docs/metrics.md); absent
    /// in clusters placed by a [`crate::Placement`] with addresses of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
}

/// `cluster.json`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ClusterFile {
    pub version: u32,
    pub manager: Node,
    pub drives: Vec<Node>,
    /// The managers after the first (`manager-1`, ...), which stand by while another leads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_managers: Vec<Node>,
}

impl ClusterFile {
    /// The component `id`, if the cluster has it.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        match id {
            NodeId::Manager => Some(&self.manager),
            NodeId::Drive(i) => self.drives.get(i),
            NodeId::ManagerN(i) => self.more_managers.get(i.checked_sub(1)?),
        }
    }

    /// Every component: the drives in order, then the managers (the order they start in).
    pub fn ids(&self) -> Vec<NodeId> {
        (0..self.drives.len())
            .map(NodeId::Drive)
            .chain(self.manager_ids())
            .collect()
    }

    /// Every manager: the first, then the others.
    pub fn manager_ids(&self) -> impl Iterator<Item = NodeId> {
        std::iter::once(NodeId::Manager).chain((1..=self.more_managers.len()).map(NodeId::ManagerN))
    }

    /// Every manager's address, in order (what clients try in turn).
    pub fn manager_addrs(&self) -> Vec<String> {
        std::iter::once(&self.manager)
            .chain(&self.more_managers)
            .map(|n| n.addr.clone())
            .collect()
    }

    /// The drive serving on `addr`.
    pub fn drive_at(&self, addr: &str) -> Option<NodeId> {
        self.drives
            .iter()
            .position(|d| d.addr == addr)
            .map(NodeId::Drive)
    }

    pub fn path(dir: &Path) -> PathBuf {
        dir.join("cluster.json")
    }

    /// The `cluster.json` of the cluster in `dir`; `None` when `dir` holds none.
    pub fn load(dir: &Path) -> Result<Option<ClusterFile>, ClusterError> {
        let path = ClusterFile::path(dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(ClusterError::Io {
                    what: "reading",
                    path,
                    source,
                })
            }
        };
        let c: ClusterFile = serde_json::from_str(&text)
            .map_err(|source| ClusterError::Malformed { path, source })?;
        Ok(Some(c))
    }
}

/// `pids.json`: (component name, pid) of each process running the cluster.
#[derive(Serialize, Deserialize, Debug, Default, Clone, PartialEq, Eq)]
pub struct Pids {
    pub pids: Vec<(String, u32)>,
}

impl Pids {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("pids.json")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_round_trip_and_strangers_are_refused() {
        for id in [
            NodeId::Manager,
            NodeId::Drive(0),
            NodeId::Drive(17),
            NodeId::ManagerN(2),
        ] {
            assert_eq!(id.to_string().parse::<NodeId>().unwrap(), id);
        }
        for bad in [
            "",
            "drive-",
            "drive-x",
            "drive--1",
            "drive-+1",
            "drive-01",
            "Manager",
            "manager-0",
            "manager-01",
        ] {
            assert!(bad.parse::<NodeId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_files_keep_their_on_disk_form() {
        let c = ClusterFile {
            version: CLUSTER_FILE_VERSION,
            manager: Node {
                name: "manager".into(),
                dir: "/d/manager".into(),
                addr: "127.0.0.1:1".into(),
                metrics: Some("127.0.0.1:3".into()),
            },
            drives: vec![Node {
                name: "drive-0".into(),
                dir: "/d/drive-0".into(),
                addr: "127.0.0.1:2".into(),
                metrics: None,
            }],
            more_managers: vec![],
        };
        let v: serde_json::Value = serde_json::to_value(&c).unwrap();
        assert_eq!(v["drives"][0]["name"], "drive-0");
        assert_eq!(v["manager"]["addr"], "127.0.0.1:1");
        assert_eq!(v["manager"]["metrics"], "127.0.0.1:3");
        assert!(v["drives"][0].get("metrics").is_none());
        assert!(
            v.get("more_managers").is_none(),
            "one manager: the old form"
        );
        let old = r#"{"name": "drive-0", "dir": "/d", "addr": "127.0.0.1:2"}"#;
        let n: Node = serde_json::from_str(old).unwrap();
        assert_eq!(
            n.metrics, None,
            "a cluster.json from before metrics still reads"
        );
        assert_eq!(c.drive_at("127.0.0.1:2"), Some(NodeId::Drive(0)));
        assert_eq!(c.ids(), vec![NodeId::Drive(0), NodeId::Manager]);
        let p = Pids {
            pids: vec![("drive-0".into(), 42)],
        };
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"pids":[["drive-0",42]]}"#
        );
    }
}
