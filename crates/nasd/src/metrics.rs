//! `--metrics ADDR` of the long-running commands (`drive run`, `manager run`, `s3 serve`,
//! `mount`): Prometheus metrics at `http://ADDR/metrics` and a health check at `/health`,
//! served by [`nasd_metrics::server`] from what each process gives it (docs/metrics.md).

use anyhow::Context as _;
use std::sync::Arc;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics and a health check at
    /// http://ADDR/health (200 ok, or 503 and the reason) on a port of their own
    /// (docs/metrics.md lists every metric).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

impl MetricsArgs {
    /// Starts the metrics server on the current runtime when `--metrics` was given, and says
    /// where (`nasd WHAT metrics on http://ADDR/metrics`).
    pub async fn start(
        &self,
        what: &str,
        source: Arc<dyn nasd_metrics::Source>,
    ) -> anyhow::Result<()> {
        let Some(addr) = &self.metrics else {
            return Ok(());
        };
        let bound = nasd_metrics::server::start(addr, source)
            .await
            .with_context(|| format!("serving metrics on {addr}"))?;
        outln!("nasd {what} metrics on http://{bound}/metrics");
        Ok(())
    }
}
