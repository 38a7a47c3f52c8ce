//! CPU time of processes, from `/proc/PID/stat` (user + system time, both in clock ticks),
//! turned into the share of one CPU a process used over a window, as seed 002 §4.3 reports
//! the file manager's CPU utilization.

/// User plus system CPU time `pid` has used so far, in seconds; `None` once it is gone.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_ticks(&stat).map(|t| t as f64 / ticks_per_s())
}

/// `utime + stime` from a `/proc/PID/stat` line. The command name (field 2) is in
/// parentheses and may hold spaces or parentheses itself, so fields are counted after the
/// last `)`: there, field 3 (`state`) comes first, `utime` is field 14 and `stime` 15.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(14 - 3)?.parse().ok()?;
    let stime: u64 = f.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

fn ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// CPU seconds of a set of processes at one instant (a process that is gone counts 0).
pub fn total_seconds(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|&p| cpu_seconds(p)).sum()
}

/// Percent of one CPU used between two readings `wall_s` seconds apart.
pub fn percent(before_s: f64, after_s: f64, wall_s: f64) -> f64 {
    if wall_s <= 0.0 {
        return 0.0;
    }
    100.0 * (after_s - before_s).max(0.0) / wall_s
}

/// The CPU's model name and the CPUs online, for the report (`/proc/cpuinfo`).
pub fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let n = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {n} CPUs")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let line = "4242 (nasd (drive) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0";
        assert_eq!(parse_stat_ticks(line), Some(325));
        assert_eq!(parse_stat_ticks("garbage"), None);
        assert!(cpu_seconds(std::process::id()).is_some());
        assert_eq!(percent(1.0, 1.5, 2.0), 25.0);
        assert_eq!(percent(1.0, 0.5, 2.0), 0.0);
    }
}
