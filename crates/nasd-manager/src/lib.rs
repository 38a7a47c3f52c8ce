//! The nasd file manager (seed 002 §3): users and groups, the namespace, file layouts, policy
//! checks and capability issuance, key rotation and the drive registry. Clients talk to it over
//! TLS 1.3 ([`server`]); it talks to drives with keys of the hierarchy it shares with each
//! drive's partition ([`drives`]). It never moves file data: clients take capabilities from it
//! and go straight to drives, so the data path keeps working while it is down, until those
//! capabilities expire.
//!
//! # Layout
//! - [`store`]: the [`store::MetaStore`] trait and its records; [`sqlite`]: the embedded store
//!   (with the file counts `nasd status` shows, kept as files change); [`postgres`]: the same
//!   store on PostgreSQL, and a private server for `nasd up --meta postgres`;
//!   [`conformance`]: the suite every store passes.
//! - [`service`]: the [`service::Manager`] and its policy (POSIX-like modes), namespace
//!   operations, capability minting, revocation; [`striping`]: the striping manager under it
//!   (seed 002 §3.3): component objects of layouts, their attributes, revocation and
//!   capabilities.
//! - `ops`: one handler per call of the protocol's table, over the service (which knows
//!   nothing of them).
//! - [`users`]: credentials (OPAQUE password files, enrollment codes, Ed25519 keys, the
//!   Argon2id hashes of accounts made before protocol 15), session tokens, one answer for
//!   every failed login; [`login`]: OPAQUE logins and registrations, enrollment codes and
//!   the OPAQUE server keys' file; [`backoff`]: waits after failed logins, per source and per
//!   user.
//! - [`drives`]: drive registration, health and free space, working-key rotation, placement
//!   of new components by room (degraded when the code allows).
//! - [`e2e`]: end-to-end protection (issue 10): directory policies, files' trusted records
//!   and side data, users' and groups' public keys and wraps; nothing the manager can unwrap.
//!   [`keylog`]: the signed head and pages of the log of every key change, and resets.
//!   [`groups`]: groups' key pairs, wrapped to members only (never to an admin who is not
//!   one), and the new key pair a removed member leaves due.
//! - [`lease`]: write leases, one writer per file (seed 002 §3.2); [`locks`]: record locks
//!   and `flock` across clients, under leases of their sessions, with a grace period after a
//!   restart.
//! - [`quota`]: per-user quotas and the escrow of write capabilities against them (seed 002
//!   §3.2): capability regions bound by the escrow, settlement when capabilities end.
//! - [`heal`]: scrub of files against their drives' trees and their codes, rebuild of
//!   components (by itself when drives come back), drive replacement, cluster status from
//!   kept counts.
//! - [`scrub`]: reclaims drive objects no name points to (orphans).
//! - [`tls`]: the cluster CA and the server certificate.
//! - [`server`]: the TLS listener, the login gate and the dispatch of calls to their
//!   handlers; [`conns`]: the connection table
//!   that bounds what peers which have not logged in can hold.
//! - [`metrics`]: what `--metrics` shows (per-call counters and latency, the store's
//!   latency, leases, callbacks, file counts, heal progress) and health.
//! - [`setup`]: `nasd manager init` and the manager's config file; its files are
//!   private to its user, checked at start.

pub mod backoff;
pub mod callbacks;
pub mod conformance;
pub mod conns;
pub mod drives;
pub mod e2e;
pub mod groups;
pub mod heal;
pub mod keylog;
pub mod lease;
pub mod locks;
pub mod login;
pub mod metrics;
mod ops;
pub mod postgres;
pub mod quota;
pub mod scrub;
pub mod server;
pub mod service;
pub mod setup;
pub mod sqlite;
pub mod store;
pub mod striping;
pub mod tls;
pub mod users;

use nasd_proto::manager::{MgrReply, MgrStatus};

/// A refusal with a stable status and a human detail naming what it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {detail}")]
pub struct MgrError {
    pub status: MgrStatus,
    pub detail: String,
}

impl MgrError {
    pub fn new(status: MgrStatus, detail: impl Into<String>) -> MgrError {
        MgrError {
            status,
            detail: detail.into(),
        }
    }
    /// Prefixes the detail with the path it concerns, unless it already names it.
    pub fn at(mut self, path: &str) -> MgrError {
        if !self.detail.contains(path) {
            self.detail = format!("{path}: {}", self.detail);
        }
        self
    }
    pub fn reply(&self) -> MgrReply {
        MgrReply::error(self.status, self.detail.clone())
    }
}

pub type MgrResult<T> = Result<T, MgrError>;

pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

pub fn now_ms() -> u64 {
    now_us() / 1000
}
