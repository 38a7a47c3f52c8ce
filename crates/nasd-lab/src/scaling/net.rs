//! The experiment's network: one network namespace per host (the manager, the SAD server,
//! every drive and every client), each joined by a veth pair to a router namespace that
//! forwards between them, and a token-bucket rate cap (`tc qdisc ... tbf`) on both ends of
//! every link while a run measures.
//!
//! ```text
//!   nasd-lab-PID-m ──┐                      ┌── nasd-lab-PID-c0
//!   nasd-lab-PID-s ──┤   nasd-lab-PID-r     ├── nasd-lab-PID-c1
//!   nasd-lab-PID-d0 ─┤ (ip_forward = 1)     ├── ...
//!   nasd-lab-PID-d1 ─┘                      └──
//!   link k: host side 10.213.a.b+2/30 (`ePIDtag`), router side 10.213.a.b+1/30 (`rPIDtag`)
//! ```
//!
//! Every name carries the lab's pid, so parallel runs never meet, and every address lives
//! only inside namespaces this module created (the root namespace gets no address, route or
//! sysctl). [`Net`] is the guard: dropping it deletes every namespace it made, and with them
//! the veths, addresses and qdiscs; processes must be stopped first (a namespace outlives
//! its name while a process runs in it). [`Net::build`] also removes what an earlier run
//! that was killed left behind ([`sweep_stale`]). [`enter`] moves the calling thread (only
//! it) into a namespace: that is how the lab's client threads and its control thread reach
//! the hosts, and threads and processes they start inherit it.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::LabError;

/// Prefix of every namespace the lab makes: `nasd-lab-PID-TAG`.
pub const NS_PREFIX: &str = "nasd-lab-";
/// Where `ip netns` keeps its named namespaces.
const NETNS_DIR: &str = "/run/netns";
/// The private range of the links: `10.213.0.0/16`, one /30 per link.
const NET_OCTETS: [u8; 2] = [10, 213];
/// Links that fit in the /16, four addresses each.
pub const LINKS_MAX: usize = 256 * 64;
/// Bucket of the token-bucket filter: enough for a 64 KiB GSO packet to pass whole.
const TBF_BURST: &str = "64kb";
/// Longest a packet may wait in a link's queue before tbf drops it.
const TBF_LATENCY: &str = "50ms";
/// How long a stale namespace's processes have after SIGTERM before SIGKILL.
const STALE_STOP_MS: u64 = 3_000;

/// A host of the experiment: each has a namespace and a link of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    /// The file manager (and the lab's control thread, which starts the cluster and writes
    /// the files).
    Manager,
    /// The server-attached-disk server.
    Sad,
    Drive(usize),
    Client(usize),
}

impl Host {
    /// Short tag in namespace and interface names.
    fn tag(self) -> String {
        match self {
            Host::Manager => "m".into(),
            Host::Sad => "s".into(),
            Host::Drive(i) => format!("d{i}"),
            Host::Client(i) => format!("c{i}"),
        }
    }

    /// The link index: manager 0, SAD server 1, drives, then clients.
    fn link(self, pairs_max: usize) -> usize {
        match self {
            Host::Manager => 0,
            Host::Sad => 1,
            Host::Drive(i) => 2 + i,
            Host::Client(i) => 2 + pairs_max + i,
        }
    }
}

/// The two addresses of link `k`: (router side, host side), each in `10.213.x.y/30`.
pub fn link_addrs(k: usize) -> (Ipv4Addr, Ipv4Addr) {
    assert!(k < LINKS_MAX, "link {k} is outside 10.213.0.0/16");
    let base = (k % 64) as u8 * 4;
    let third = (k / 64) as u8;
    let a = |last| Ipv4Addr::new(NET_OCTETS[0], NET_OCTETS[1], third, last);
    (a(base + 1), a(base + 2))
}

/// The namespaces and links of one run; dropping it removes them all.
pub struct Net {
    pid: u32,
    pairs_max: usize,
    /// Namespaces made, router first; deleted in reverse.
    made: Vec<String>,
}

impl Net {
    /// Builds the router and one host per manager, SAD server, `pairs_max` drives and
    /// `pairs_max` clients. Not root, no `ip`, no network namespaces or no `tbf` qdisc:
    /// [`LabError::Unavailable`], saying which.
    pub fn build(pairs_max: usize) -> Result<Net, LabError> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(LabError::Unavailable(
                "it needs root (network namespaces, veth pairs and tc qdiscs); run it as root"
                    .into(),
            ));
        }
        assert!(2 + 2 * pairs_max <= LINKS_MAX);
        sweep_stale();
        let mut net = Net {
            pid: std::process::id(),
            pairs_max,
            made: vec![],
        };
        let router = net.ns_name("r");
        net.add_ns(&router).map_err(|e| {
            LabError::Unavailable(format!(
                "`ip netns add` fails, so no network namespaces: {e}"
            ))
        })?;
        in_namespace(&router, || {
            std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
        })
        .map_err(|e| LabError::Unavailable(format!("enabling forwarding in {router}: {e}")))?;
        for h in net.hosts() {
            net.add_host(h)?;
        }
        // Probe the rate cap once, so a kernel without sch_tbf is told apart from a failure.
        let probe = Host::Manager;
        let (ns, dev) = (net.ns(probe), net.host_dev(probe));
        ip(&tbf_args(&ns, &dev, 8))
            .and_then(|_| ip(&["tc", "-n", &ns, "qdisc", "del", "dev", &dev, "root"]))
            .map_err(|e| LabError::Unavailable(format!("no tbf rate cap: {e}")))?;
        Ok(net)
    }

    /// Every host, in link order.
    fn hosts(&self) -> Vec<Host> {
        let mut v = vec![Host::Manager, Host::Sad];
        v.extend((0..self.pairs_max).map(Host::Drive));
        v.extend((0..self.pairs_max).map(Host::Client));
        v
    }

    fn ns_name(&self, tag: &str) -> String {
        format!("{NS_PREFIX}{}-{tag}", self.pid)
    }

    /// The namespace of `h`.
    pub fn ns(&self, h: Host) -> String {
        self.ns_name(&h.tag())
    }

    /// The address `h` has on its link.
    pub fn addr(&self, h: Host) -> Ipv4Addr {
        link_addrs(h.link(self.pairs_max)).1
    }

    /// The command line that runs a command in `h`'s namespace (a component wrapper).
    pub fn exec_prefix(&self, h: Host) -> Vec<std::ffi::OsString> {
        ["ip", "netns", "exec", &self.ns(h)]
            .iter()
            .map(|s| s.into())
            .collect()
    }

    /// Interface names: at most 15 bytes (`e` or `r`, a pid of at most 7 digits, a tag).
    fn host_dev(&self, h: Host) -> String {
        format!("e{}{}", self.pid, h.tag())
    }

    fn router_dev(&self, h: Host) -> String {
        format!("r{}{}", self.pid, h.tag())
    }

    fn add_ns(&mut self, name: &str) -> Result<(), LabError> {
        ip(&["ip", "netns", "add", name])?;
        self.made.push(name.to_string());
        Ok(())
    }

    /// Makes `h`'s namespace and its link to the router: addresses, loopback, default route.
    fn add_host(&mut self, h: Host) -> Result<(), LabError> {
        let (ns, router) = (self.ns(h), self.ns_name("r"));
        self.add_ns(&ns)?;
        let (hd, rd) = (self.host_dev(h), self.router_dev(h));
        let (gw, addr) = link_addrs(h.link(self.pairs_max));
        let (gw_cidr, addr_cidr) = (format!("{gw}/30"), format!("{addr}/30"));
        let gw_s = gw.to_string();
        let steps: [&[&str]; 7] = [
            &[
                "ip", "link", "add", &hd, "netns", &ns, "type", "veth", "peer", "name", &rd,
                "netns", &router,
            ],
            &["ip", "-n", &ns, "addr", "add", &addr_cidr, "dev", &hd],
            &["ip", "-n", &router, "addr", "add", &gw_cidr, "dev", &rd],
            &["ip", "-n", &ns, "link", "set", "lo", "up"],
            &["ip", "-n", &ns, "link", "set", &hd, "up"],
            &["ip", "-n", &router, "link", "set", &rd, "up"],
            &["ip", "-n", &ns, "route", "add", "default", "via", &gw_s],
        ];
        for s in steps {
            ip(s)?;
        }
        Ok(())
    }

    /// Caps every link at `rate_mbit` Mbit/s in each direction (a tbf qdisc on both ends)
    /// until the returned guard is dropped.
    pub fn cap(&self, rate_mbit: u32) -> Result<Capped<'_>, LabError> {
        let guard = Capped(self);
        let router = self.ns_name("r");
        for h in self.hosts() {
            ip(&tbf_args(&self.ns(h), &self.host_dev(h), rate_mbit))?;
            ip(&tbf_args(&router, &self.router_dev(h), rate_mbit))?;
        }
        Ok(guard)
    }

    /// Lifts every cap there is (setup runs at veth speed).
    fn uncap(&self) {
        let router = self.ns_name("r");
        for h in self.hosts() {
            for (ns, dev) in [
                (self.ns(h), self.host_dev(h)),
                (router.clone(), self.router_dev(h)),
            ] {
                // A link that was never capped has no qdisc to delete: not an error.
                let _ = ip(&["tc", "-n", &ns, "qdisc", "del", "dev", &dev, "root"]);
            }
        }
    }
}

/// The links are capped while this lives ([`Net::cap`]).
pub struct Capped<'a>(&'a Net);

impl Drop for Capped<'_> {
    fn drop(&mut self) {
        self.0.uncap();
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.made.iter().rev() {
            if let Err(e) = ip(&["ip", "netns", "del", ns]) {
                eprintln!("nasd lab scaling: leaving namespace {ns}: {e}");
            }
        }
    }
}

fn tbf_args(ns: &str, dev: &str, rate_mbit: u32) -> Vec<String> {
    [
        "tc",
        "-n",
        ns,
        "qdisc",
        "replace",
        "dev",
        dev,
        "root",
        "tbf",
        "rate",
        &format!("{rate_mbit}mbit"),
        "burst",
        TBF_BURST,
        "latency",
        TBF_LATENCY,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs `argv` (`ip ...` or `tc ...`); an error carries the command and what it printed.
fn ip<S: AsRef<str>>(argv: &[S]) -> Result<(), LabError> {
    let argv: Vec<&str> = argv.iter().map(AsRef::as_ref).collect();
    let command = argv.join(" ");
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .map_err(|e| LabError::Network {
            command: command.clone(),
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(LabError::Network {
            command,
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// Moves the calling thread into the network namespace `ns` (a name under `/run/netns`).
/// Only this thread moves; threads and processes it starts afterwards are born there.
pub fn enter(ns: &str) -> Result<(), LabError> {
    use std::os::fd::AsRawFd as _;
    let path = format!("{NETNS_DIR}/{ns}");
    let err = |e: std::io::Error| LabError::Network {
        command: format!("setns {path}"),
        detail: e.to_string(),
    };
    let f = std::fs::File::open(&path).map_err(err)?;
    // SAFETY: `f` is an open network-namespace file; setns changes only the calling
    // thread's network namespace (CLONE_NEWNET may be joined by a multithreaded process).
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Runs `f` on a thread of its own inside `ns`.
fn in_namespace<T: Send>(
    ns: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send,
) -> Result<T, LabError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns)?;
            f().map_err(|e| LabError::Network {
                command: format!("in {ns}"),
                detail: e.to_string(),
            })
        })
        .join()
        .expect("a namespace thread does not panic")
    })
}

/// Removes what lab runs that no longer exist left behind (killed with SIGKILL, their
/// guards never ran): each namespace `nasd-lab-PID-*` whose PID is not a running nasd
/// process, after stopping the nasd processes still inside it. Best effort: failures are
/// reported, not fatal.
pub fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(NS_PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || is_nasd(pid) {
            continue;
        }
        stop_nasd_in(&name);
        if let Err(e) = ip(&["ip", "netns", "del", &name]) {
            eprintln!("nasd lab scaling: cannot remove the stale namespace {name}: {e}");
        }
    }
}

fn is_nasd(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains("nasd"))
        .unwrap_or(false)
}

/// SIGTERM, then SIGKILL after [`STALE_STOP_MS`], to the nasd processes in `ns`.
fn stop_nasd_in(ns: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() else {
        return;
    };
    let pids: Vec<u32> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|&p| is_nasd(p))
        .collect();
    for &p in &pids {
        // SAFETY: signalling a nasd process left in one of the lab's namespaces.
        unsafe { libc::kill(p as i32, libc::SIGTERM) };
    }
    let t0 = Instant::now();
    while pids.iter().any(|&p| is_nasd(p)) && t0.elapsed() < Duration::from_millis(STALE_STOP_MS) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &p in pids.iter().filter(|&&p| is_nasd(p)) {
        // SAFETY: as above, after it ignored SIGTERM.
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
}

/// Set by SIGINT or SIGTERM while an [`Interrupts`] guard lives.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Whether SIGINT or SIGTERM arrived during the run: the run then stops at its next step
/// and unwinds, so every guard (processes, namespaces) cleans up.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Catches SIGINT and SIGTERM while it lives (they set [`interrupted`] instead of ending
/// the process before the guards ran); restores the previous handlers when dropped.
pub struct Interrupts {
    old: [(libc::c_int, libc::sigaction); 2],
}

impl Interrupts {
    pub fn install() -> Interrupts {
        INTERRUPTED.store(false, Ordering::SeqCst);
        let mut old = [
            (libc::SIGINT, zeroed_sigaction()),
            (libc::SIGTERM, zeroed_sigaction()),
        ];
        for (sig, prev) in old.iter_mut() {
            let mut sa = zeroed_sigaction();
            sa.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as usize;
            // SAFETY: installing an async-signal-safe handler (one atomic store); `prev`
            // receives the handler it replaces.
            unsafe {
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(*sig, &sa, prev);
            }
        }
        Interrupts { old }
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restoring the handler `install` replaced.
            unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
        }
    }
}

fn zeroed_sigaction() -> libc::sigaction {
    // SAFETY: sigaction is plain data; all zeroes is SIG_DFL with no flags.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_get_disjoint_slash_30s_in_10_213() {
        assert_eq!(
            link_addrs(0),
            (Ipv4Addr::new(10, 213, 0, 1), Ipv4Addr::new(10, 213, 0, 2))
        );
        assert_eq!(
            link_addrs(1),
            (Ipv4Addr::new(10, 213, 0, 5), Ipv4Addr::new(10, 213, 0, 6))
        );
        assert_eq!(
            link_addrs(64),
            (Ipv4Addr::new(10, 213, 1, 1), Ipv4Addr::new(10, 213, 1, 2))
        );
        let mut seen = std::collections::BTreeSet::new();
        for k in 0..200 {
            let (r, h) = link_addrs(k);
            // Same /30, distinct from every other link's.
            assert_eq!(u32::from(r) >> 2, u32::from(h) >> 2);
            assert!(seen.insert(u32::from(r) >> 2), "{k}");
        }
    }

    #[test]
    fn names_fit_the_kernel_limits() {
        let n = Net {
            pid: 4_194_304,
            pairs_max: 8,
            made: vec![],
        };
        for h in n.hosts() {
            assert!(n.host_dev(h).len() <= 15, "{}", n.host_dev(h));
            assert!(n.router_dev(h).len() <= 15);
            assert!(n.ns(h).starts_with("nasd-lab-4194304-"));
        }
        assert_eq!(n.addr(Host::Client(0)), link_addrs(10).1);
    }
}
