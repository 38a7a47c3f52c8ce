//! What the gateway shows through `nasd s3 serve --metrics ADDR` (docs/metrics.md):
//! requests, errors by HTTP status, bytes in and out and latency per S3 operation, counted
//! where each request is logged ([`crate::front`]: once its answer is sent, or when its
//! client goes away); and health: the gateway's own session reaches the manager (a `stat`
//! of the bucket root).

use crate::access::Access;
use nasd_metrics::ops::{OpStats, Outcome};
use nasd_metrics::Exposition;
use std::sync::Arc;
use std::time::Duration;

/// Every operation s3s 0.14 names (`S3Operation::name`); a request s3s did not name (refused
/// before it was routed) counts as `other`.
pub const S3_OPERATIONS: &[&str] = &[
    "AbortMultipartUpload",
    "CompleteMultipartUpload",
    "CopyObject",
    "CreateBucket",
    "CreateBucketMetadataTableConfiguration",
    "CreateMultipartUpload",
    "CreateSession",
    "DeleteBucket",
    "DeleteBucketAnalyticsConfiguration",
    "DeleteBucketCors",
    "DeleteBucketEncryption",
    "DeleteBucketIntelligentTieringConfiguration",
    "DeleteBucketInventoryConfiguration",
    "DeleteBucketLifecycle",
    "DeleteBucketMetadataTableConfiguration",
    "DeleteBucketMetricsConfiguration",
    "DeleteBucketOwnershipControls",
    "DeleteBucketPolicy",
    "DeleteBucketReplication",
    "DeleteBucketTagging",
    "DeleteBucketWebsite",
    "DeleteObject",
    "DeleteObjectTagging",
    "DeleteObjects",
    "DeletePublicAccessBlock",
    "GetBucketAccelerateConfiguration",
    "GetBucketAcl",
    "GetBucketAnalyticsConfiguration",
    "GetBucketCors",
    "GetBucketEncryption",
    "GetBucketIntelligentTieringConfiguration",
    "GetBucketInventoryConfiguration",
    "GetBucketLifecycleConfiguration",
    "GetBucketLocation",
    "GetBucketLogging",
    "GetBucketMetadataTableConfiguration",
    "GetBucketMetricsConfiguration",
    "GetBucketNotificationConfiguration",
    "GetBucketOwnershipControls",
    "GetBucketPolicy",
    "GetBucketPolicyStatus",
    "GetBucketReplication",
    "GetBucketRequestPayment",
    "GetBucketTagging",
    "GetBucketVersioning",
    "GetBucketWebsite",
    "GetObject",
    "GetObjectAcl",
    "GetObjectAttributes",
    "GetObjectLegalHold",
    "GetObjectLockConfiguration",
    "GetObjectRetention",
    "GetObjectTagging",
    "GetObjectTorrent",
    "GetPublicAccessBlock",
    "HeadBucket",
    "HeadObject",
    "ListBucketAnalyticsConfigurations",
    "ListBucketIntelligentTieringConfigurations",
    "ListBucketInventoryConfigurations",
    "ListBucketMetricsConfigurations",
    "ListBuckets",
    "ListDirectoryBuckets",
    "ListMultipartUploads",
    "ListObjectVersions",
    "ListObjects",
    "ListObjectsV2",
    "ListParts",
    "PostObject",
    "PutBucketAccelerateConfiguration",
    "PutBucketAcl",
    "PutBucketAnalyticsConfiguration",
    "PutBucketCors",
    "PutBucketEncryption",
    "PutBucketIntelligentTieringConfiguration",
    "PutBucketInventoryConfiguration",
    "PutBucketLifecycleConfiguration",
    "PutBucketLogging",
    "PutBucketMetricsConfiguration",
    "PutBucketNotificationConfiguration",
    "PutBucketOwnershipControls",
    "PutBucketPolicy",
    "PutBucketReplication",
    "PutBucketRequestPayment",
    "PutBucketTagging",
    "PutBucketVersioning",
    "PutBucketWebsite",
    "PutObject",
    "PutObjectAcl",
    "PutObjectLegalHold",
    "PutObjectLockConfiguration",
    "PutObjectRetention",
    "PutObjectTagging",
    "PutPublicAccessBlock",
    "RestoreObject",
    "SelectObjectContent",
    "UploadPart",
    "UploadPartCopy",
    "WriteGetObjectResponse",
];

/// The HTTP statuses an answer that failed may have; others count as `other`.
pub const ERROR_STATUSES: &[u16] = &[
    400, 401, 403, 404, 405, 409, 411, 412, 413, 416, 429, 499, 500, 501, 502, 503, 504,
];

/// The gateway's per-operation table.
pub struct GatewayMetrics {
    ops: OpStats,
}

impl Default for GatewayMetrics {
    fn default() -> GatewayMetrics {
        GatewayMetrics {
            ops: OpStats::new(
                S3_OPERATIONS.iter().copied(),
                ERROR_STATUSES.iter().map(u16::to_string),
            ),
        }
    }
}

impl GatewayMetrics {
    /// Counts one request of operation `op` answered with HTTP `status` (an error from 400
    /// on).
    pub fn record(&self, op: &str, status: u16, bytes_in: u64, bytes_out: u64, elapsed: Duration) {
        let error = (status >= 400).then(|| {
            ERROR_STATUSES
                .iter()
                .position(|s| *s == status)
                .unwrap_or(ERROR_STATUSES.len())
        });
        self.ops.record(
            self.ops.op(op),
            Outcome {
                error,
                bytes_in,
                bytes_out,
                elapsed,
            },
        );
    }

    /// Requests of operation `op` so far (tests).
    pub fn requests(&self, op: &str) -> u64 {
        self.ops.requests(op)
    }
}

/// The gateway as a metrics source.
pub struct GatewaySource {
    pub metrics: Arc<GatewayMetrics>,
    pub access: Arc<Access>,
    /// The bucket root, which the health check stats.
    pub root: String,
    pub runtime: tokio::runtime::Handle,
}

impl nasd_metrics::Source for GatewaySource {
    fn render(&self, e: &mut Exposition) {
        self.metrics.ops.render(e, "nasd_s3", "S3 requests");
    }

    fn health(&self) -> Result<(), String> {
        let c = self.access.gateway().clone();
        let root = self.root.clone();
        // On the blocking pool, where waiting for the runtime is allowed.
        match self.runtime.block_on(async move { c.stat(&root).await }) {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("the gateway cannot reach the manager: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_distinct_and_errors_are_statuses_from_400() {
        let m = GatewayMetrics::default();
        m.record("GetObject", 200, 0, 10, Duration::from_millis(1));
        m.record("GetObject", 404, 0, 0, Duration::from_millis(1));
        m.record("-", 403, 0, 0, Duration::from_millis(1));
        m.record("GetObject", 304, 0, 0, Duration::from_millis(1));
        assert_eq!(m.requests("GetObject"), 3);
        assert_eq!(m.requests("other"), 1);
        let mut e = Exposition::new();
        m.ops.render(&mut e, "nasd_s3", "S3 requests");
        let t = e.finish();
        assert!(
            t.contains("nasd_s3_errors_total{op=\"GetObject\",status=\"404\"} 1\n"),
            "{t}"
        );
        assert!(t.contains("nasd_s3_errors_total{op=\"other\",status=\"403\"} 1\n"));
        assert!(!t.contains("status=\"304\""));
    }
}
