//! Free loopback ports for a cluster's components: drawn at random below the kernel's
//! ephemeral range, never twice in one draw, and never one that another nasd process of the
//! same user handed out in the last [`PORT_RESERVE_SECS`] (a component binds its port only
//! when it starts, so until then the port looks free to everyone else).
//!
//! The hand-outs are recorded in a small file under the runtime directory, read and
//! rewritten under an exclusive `flock`. Where that file cannot be used (not ours, a
//! read-only directory), ports are still drawn, only without the record.

use crate::error::ClusterError;
use std::collections::HashSet;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::time::{SystemTime, UNIX_EPOCH};

/// Lowest port [`free_addrs`] draws (above the well-known and most registered services).
pub const PORT_FLOOR: u16 = 20000;
/// How long a port handed out stays reserved for the component it was drawn for.
pub const PORT_RESERVE_SECS: u64 = 120;
/// Draws tried below the ephemeral range per address before falling back to port 0.
const DRAWS_PER_ADDR: usize = 50;

/// `n` distinct free loopback addresses (the ports are released at once, for the
/// components to bind; all are held until every one is chosen, so none repeats).
///
/// The ports are drawn at random below the kernel's ephemeral range: a port from that range
/// (what binding port 0 gives) can be handed to any outgoing connection or another port-0
/// bind while its component is stopped, and then the component cannot start again on its
/// address. Where the range leaves no room below it, port 0 it is.
pub fn free_addrs(n: usize) -> Result<Vec<String>, ClusterError> {
    free_addrs_avoiding(n, &[])
}

/// [`free_addrs`], none of them in `taken` (addresses recorded for components that are not
/// running now, so their ports look free).
pub fn free_addrs_avoiding(n: usize, taken: &[&str]) -> Result<Vec<String>, ClusterError> {
    let mut record = Record::open();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut recent = record.as_mut().map(|r| r.recent(now)).unwrap_or_default();
    let avoid: HashSet<u16> = taken
        .iter()
        .filter_map(|a| a.strip_prefix("127.0.0.1:")?.parse().ok())
        .chain(recent.iter().map(|(p, _)| *p))
        .collect();
    let addrs = draw(n, &avoid)?;
    if let Some(r) = record.as_mut() {
        let ports = addrs.iter().filter_map(|a| a.port_of());
        recent.extend(ports.map(|p| (p, now)));
        r.write(&recent);
    }
    Ok(addrs)
}

/// Draws `n` ports, none in `avoid`, holding each bound until all are chosen.
fn draw(n: usize, avoid: &HashSet<u16>) -> Result<Vec<String>, ClusterError> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let mut held: Vec<std::net::TcpListener> = Vec::with_capacity(n);
    let mut seed = {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish() | 1
    };
    let mut tries = 0;
    while held.len() < n {
        let l = if low > PORT_FLOOR + 1000 && tries < n * DRAWS_PER_ADDR {
            tries += 1;
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let port = PORT_FLOOR + (seed % u64::from(low - PORT_FLOOR)) as u16;
            if avoid.contains(&port) {
                continue;
            }
            match std::net::TcpListener::bind(("127.0.0.1", port)) {
                Ok(l) => l,
                Err(_) => continue,
            }
        } else {
            std::net::TcpListener::bind("127.0.0.1:0").map_err(ClusterError::Port)?
        };
        held.push(l);
    }
    held.iter()
        .map(|l| Ok(l.local_addr().map_err(ClusterError::Port)?.to_string()))
        .collect()
}

trait PortOf {
    fn port_of(&self) -> Option<u16>;
}

impl PortOf for String {
    fn port_of(&self) -> Option<u16> {
        self.rsplit_once(':')?.1.parse().ok()
    }
}

/// The file of recent hand-outs, open and locked (the lock goes with the file).
struct Record(std::fs::File);

impl Record {
    /// Opens and locks the record: `$XDG_RUNTIME_DIR/nasd-ports`, else `nasd-ports-UID` in
    /// the temporary directory; never through a symlink, and only a file this user owns.
    fn open() -> Option<Record> {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let path = match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(d) => std::path::PathBuf::from(d).join("nasd-ports"),
            None => std::env::temp_dir().join(format!("nasd-ports-{uid}")),
        };
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .ok()?;
        if f.metadata().ok()?.uid() != uid {
            return None;
        }
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open for the life of `f`; the lock goes when it closes.
        (unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0).then_some(Record(f))
    }

    /// The hand-outs younger than [`PORT_RESERVE_SECS`]: lines of `PORT SECONDS`; a line that
    /// does not parse is dropped.
    fn recent(&mut self, now: u64) -> Vec<(u16, u64)> {
        let mut text = String::new();
        if self.0.read_to_string(&mut text).is_err() {
            return vec![];
        }
        text.lines()
            .filter_map(|l| {
                let (p, t) = l.split_once(' ')?;
                Some((p.parse().ok()?, t.parse().ok()?))
            })
            .filter(|(_, t): &(u16, u64)| now.saturating_sub(*t) < PORT_RESERVE_SECS)
            .collect()
    }

    /// Replaces the record with `recent` (best effort: a failed write only loses the record).
    fn write(&mut self, recent: &[(u16, u64)]) {
        let text: String = recent.iter().map(|(p, t)| format!("{p} {t}\n")).collect();
        let _ = self.0.set_len(0);
        let _ = self.0.rewind();
        let _ = self.0.write_all(text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(addrs: &[String]) -> HashSet<u16> {
        addrs.iter().filter_map(|a| a.port_of()).collect()
    }

    #[test]
    fn addresses_are_distinct_loopback_ports_below_the_ephemeral_range() {
        let addrs = free_addrs(40).unwrap();
        let ports = ports(&addrs);
        assert_eq!(ports.len(), 40);
        assert!(addrs.iter().all(|a| a.starts_with("127.0.0.1:")));
        let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok());
        if let Some(low) = low.filter(|l| *l > PORT_FLOOR + 1000) {
            assert!(
                ports.iter().all(|p| (PORT_FLOOR..low).contains(p)),
                "{ports:?}"
            );
        }
    }

    #[test]
    fn a_port_handed_out_is_not_handed_out_again_while_reserved() {
        // 2,000 draws from about 12,000 ports: without the record, separate draws would
        // repeat a port almost surely (the birthday bound); with it, none may.
        let mut seen = HashSet::new();
        for _ in 0..100 {
            for p in ports(&free_addrs(20).unwrap()) {
                assert!(seen.insert(p), "port {p} handed out twice");
            }
        }
    }

    #[test]
    fn taken_addresses_are_avoided() {
        let first = free_addrs(30).unwrap();
        let taken: Vec<&str> = first.iter().map(String::as_str).collect();
        let again = free_addrs_avoiding(30, &taken).unwrap();
        assert!(ports(&first).is_disjoint(&ports(&again)));
    }
}
