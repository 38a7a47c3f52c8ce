//! The managers a client may reach: one address, or every manager of a cluster whose
//! managers take turns leading one database (docs/manager.md, "Several managers"). One of
//! them serves at a time and the others refuse connections, so a client tries them in turn,
//! starting with the one that last answered, and while the next leader takes over (every one
//! refuses) it keeps trying for up to [`FAILOVER_WAIT_MS`].
//!
//! In `client.json` the field `manager` is a string when there is one manager, as before,
//! and a list when there are several.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How long a client with several managers keeps trying them while none accepts (the
/// leader died and the next one has not yet taken the lead and bound its port).
pub const FAILOVER_WAIT_MS: u64 = 15_000;
/// The pause between two rounds of tries while none accepts.
pub const FAILOVER_ROUND_PAUSE_MS: u64 = 100;

/// HOST:PORT of each manager, in the order the cluster lists them; clones share which one
/// answered last.
#[derive(Clone, Debug)]
pub struct ManagerAddrs {
    addrs: Vec<String>,
    /// The index of the manager that answered last, where the next connection starts.
    last_good: Arc<AtomicUsize>,
}

impl ManagerAddrs {
    /// `addrs` (at least one).
    pub fn new(addrs: Vec<String>) -> ManagerAddrs {
        assert!(!addrs.is_empty(), "a cluster has at least one manager");
        ManagerAddrs {
            addrs,
            last_good: Arc::default(),
        }
    }

    /// The first manager listed (the only one of a cluster with one).
    pub fn first(&self) -> &str {
        &self.addrs[0]
    }

    /// Every manager, in the cluster's order.
    pub fn all(&self) -> &[String] {
        &self.addrs
    }

    /// Whether a client waits out a take-over ([`FAILOVER_WAIT_MS`]): only with several.
    pub fn several(&self) -> bool {
        self.addrs.len() > 1
    }

    /// The managers in the order to try them now: the last that answered first.
    pub fn in_turn(&self) -> impl Iterator<Item = (usize, &str)> {
        let start = self.last_good.load(Ordering::Relaxed) % self.addrs.len();
        (0..self.addrs.len())
            .map(move |k| (start + k) % self.addrs.len())
            .map(|i| (i, self.addrs[i].as_str()))
    }

    /// Remembers that manager `i` answered.
    pub fn answered(&self, i: usize) {
        self.last_good.store(i, Ordering::Relaxed);
    }
}

impl PartialEq for ManagerAddrs {
    fn eq(&self, other: &ManagerAddrs) -> bool {
        self.addrs == other.addrs
    }
}

impl Eq for ManagerAddrs {}

impl From<String> for ManagerAddrs {
    fn from(a: String) -> ManagerAddrs {
        ManagerAddrs::new(vec![a])
    }
}

impl From<&str> for ManagerAddrs {
    fn from(a: &str) -> ManagerAddrs {
        ManagerAddrs::new(vec![a.to_string()])
    }
}

impl std::fmt::Display for ManagerAddrs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.addrs.join(","))
    }
}

/// The form in `client.json`: a string for one manager, a list for several.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum OneOrMore {
    One(String),
    More(Vec<String>),
}

impl Serialize for ManagerAddrs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.addrs.as_slice() {
            [one] => OneOrMore::One(one.clone()),
            more => OneOrMore::More(more.to_vec()),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ManagerAddrs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ManagerAddrs, D::Error> {
        let addrs = match OneOrMore::deserialize(d)? {
            OneOrMore::One(a) => vec![a],
            OneOrMore::More(v) if v.is_empty() => {
                return Err(serde::de::Error::custom("an empty list of managers"))
            }
            OneOrMore::More(v) => v,
        };
        Ok(ManagerAddrs::new(addrs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_manager_is_a_string_and_several_a_list() {
        let one: ManagerAddrs = serde_json::from_str(r#""m:1""#).unwrap();
        assert_eq!(one.all(), ["m:1"]);
        assert_eq!(serde_json::to_string(&one).unwrap(), r#""m:1""#);
        let two: ManagerAddrs = serde_json::from_str(r#"["m:1", "n:2"]"#).unwrap();
        assert_eq!(serde_json::to_string(&two).unwrap(), r#"["m:1","n:2"]"#);
        assert!(two.several() && !one.several());
        assert!(serde_json::from_str::<ManagerAddrs>("[]").is_err());
        assert!(serde_json::from_str::<ManagerAddrs>("7").is_err());
    }

    #[test]
    fn tries_start_with_the_manager_that_answered_last_in_every_clone() {
        let m = ManagerAddrs::new(vec!["a:1".into(), "b:2".into(), "c:3".into()]);
        let order = |m: &ManagerAddrs| m.in_turn().map(|(_, a)| a.to_string()).collect::<Vec<_>>();
        assert_eq!(order(&m), ["a:1", "b:2", "c:3"]);
        let copy = m.clone();
        copy.answered(2);
        assert_eq!(order(&m), ["c:3", "a:1", "b:2"]);
    }
}
