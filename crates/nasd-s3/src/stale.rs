//! Abandoned multipart uploads expire (issue 22 §2). An upload nobody completes or aborts
//! holds its parts, counted against its user's quota, until someone does; so the gateway
//! looks through the staging directory every [`sweep_every`] of the expiry (at most hourly)
//! with its own session, and removes each upload whose directory has not changed for the
//! expiry (`nasd s3 serve --stale-upload-secs`, default [`STALE_UPLOAD_SECS_DEFAULT`], as
//! S3's lifecycle rule `AbortIncompleteMultipartUpload` would), through a session acting for
//! the upload's owner, exactly as that user's abort would. An upload still receiving parts
//! is not stale: each part changes its directory.

use crate::access::Access;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long an upload may sit unchanged before it is removed, unless configured: a week.
pub const STALE_UPLOAD_SECS_DEFAULT: u64 = 7 * 24 * 3600;
/// The longest time between two sweeps.
const SWEEP_EVERY_MAX: Duration = Duration::from_secs(3600);

/// Time between sweeps for an expiry of `expiry`: a quarter of it, between a second and an
/// hour, so an upload goes at most a quarter late.
pub fn sweep_every(expiry: Duration) -> Duration {
    (expiry / 4).clamp(Duration::from_secs(1), SWEEP_EVERY_MAX)
}

/// Sweeps the staging directory `staging` for ever.
pub async fn sweep_forever(access: Arc<Access>, staging: String, expiry: Duration) {
    let mut tick = tokio::time::interval(sweep_every(expiry));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let removed = sweep(&access, &staging, expiry).await;
        if removed > 0 {
            tracing::info!("removed {removed} multipart upload(s) unchanged for {expiry:?}");
        }
    }
}

/// Removes the uploads in `staging` unchanged for `expiry`; how many it removed. An upload
/// whose owner the gateway cannot act for now (no S3 key left) stays for a later sweep.
pub async fn sweep(access: &Arc<Access>, staging: &str, expiry: Duration) -> usize {
    let entries = match access.gateway().list(staging).await {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!("listing {staging} for stale uploads: {e}");
            return 0;
        }
    };
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let mut removed = 0;
    for e in entries {
        let age = Duration::from_micros(now_us.saturating_sub(e.stat.mtime_us));
        if !crate::multipart::is_upload_dir(&e) || age < expiry {
            continue;
        }
        let Ok(c) = access.client_for(&e.stat.owner).await else {
            continue;
        };
        let dir = format!("{}/{}", staging.trim_end_matches('/'), e.name);
        if crate::multipart::remove_upload(&c, &dir).await {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_come_a_quarter_of_the_expiry_apart_within_bounds() {
        assert_eq!(sweep_every(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(
            sweep_every(Duration::from_secs(40)),
            Duration::from_secs(10)
        );
        assert_eq!(
            sweep_every(Duration::from_secs(STALE_UPLOAD_SECS_DEFAULT)),
            SWEEP_EVERY_MAX
        );
    }
}
