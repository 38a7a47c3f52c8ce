//! Parsers for flag values: protections, schemes, rights, durations, byte sizes.

use nasd_proto::{Protection, Rights, Scheme, Suite};
use std::time::Duration;

pub fn protection(s: &str) -> Result<Protection, String> {
    Protection::parse(s).ok_or_else(|| {
        format!(
            "unknown protection `{s}` (none, integrity-args, integrity-data, privacy-args, \
             privacy-data, privacy-capability; combine with commas)"
        )
    })
}

pub fn scheme(s: &str) -> Result<Scheme, String> {
    Scheme::parse(s).ok_or_else(|| format!("unknown scheme `{s}` (mac, digest, incremental, tree)"))
}

pub fn suite(s: &str) -> Result<Suite, String> {
    Suite::parse(s).ok_or_else(|| format!("unknown suite `{s}` (blake3, sha256)"))
}

pub fn rights(s: &str) -> Result<Rights, String> {
    Rights::parse(s).ok_or_else(|| {
        format!(
            "unknown rights in `{s}` (read, write, getattr, setattr, create, remove, fastcopy, \
             flush, blocksrequired, all)"
        )
    })
}

/// `120s`, `5m`, `2h`, `1d`, `500ms`, or a plain number of seconds.
pub fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("bad duration `{s}` (e.g. 120s, 5m, 2h)"))?;
    let ms = match unit {
        "ms" => n,
        "" | "s" => n.saturating_mul(1000),
        "m" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        "d" => n.saturating_mul(86_400_000),
        _ => return Err(format!("bad duration unit in `{s}` (ms, s, m, h, d)")),
    };
    Ok(Duration::from_millis(ms))
}

/// A byte count: plain, or with a `K`/`M`/`G`/`T` (binary) suffix, optionally followed by `iB`.
pub fn bytes(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches("iB").trim_end_matches('B');
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        Some('T' | 't') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("bad byte count `{s}` (e.g. 4096, 64K, 1G)"))
}

/// A number in decimal or `0x` hex.
pub fn number(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("bad number `{s}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(duration("120s").unwrap(), Duration::from_secs(120));
        assert_eq!(duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(duration("15").unwrap(), Duration::from_secs(15));
        assert_eq!(duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(duration("soon").is_err());
        assert_eq!(bytes("64K").unwrap(), 65536);
        assert_eq!(bytes("1GiB").unwrap(), 1 << 30);
        assert_eq!(bytes("4096").unwrap(), 4096);
        assert!(bytes("x").is_err());
        assert_eq!(number("0x10").unwrap(), 16);
        assert_eq!(
            protection("privacy-data,privacy-capability").unwrap(),
            Protection::PRIVACY_DATA.union(Protection::PRIVACY_CAPABILITY)
        );
    }
}
