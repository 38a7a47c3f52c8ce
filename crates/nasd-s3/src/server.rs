//! The HTTP(S) side: one task per connection (HTTP/1.1 or HTTP/2, TLS optional), each
//! request handed through [`crate::front`] to s3s. Hostile peers meet named limits: every
//! connection is timed from its accept and connections are capped in total and per source
//! ([`crate::conns`]), a request's head fits [`HEADER_BYTES_MAX`] and [`HEADERS_MAX`], an
//! HTTP/2 connection carries at most [`H2_STREAMS_MAX`] requests at once, XML bodies are
//! bounded, and a failed `accept` (out of file descriptors) pauses the loop instead of
//! ending it.

use crate::access::{Access, KeyAuth};
use crate::conns::{Conns, Stalls, HEADER_READ_TIMEOUT_MS};
use crate::front::{self, Front};
use crate::gateway::Gateway;
use crate::guard::Guard;
use crate::log::AccessLog;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use s3s::service::S3ServiceBuilder;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Largest request head (request line and headers).
pub const HEADER_BYTES_MAX: usize = 64 << 10;
/// Most headers in one request.
pub const HEADERS_MAX: usize = 128;
/// Requests one HTTP/2 connection carries at once.
pub const H2_STREAMS_MAX: u32 = 64;
/// Largest XML request body (a DeleteObjects of 1,000 keys of 1,024 bytes fits).
pub const XML_BODY_BYTES_MAX: usize = 2 << 20;
/// Pause after a failed `accept`.
const ACCEPT_PAUSE_MS: u64 = 100;

/// How the gateway serves.
#[derive(Default)]
pub struct Options {
    /// HTTPS with this certificate.
    pub tls: Option<Tls>,
    /// Serve SigV2-signed requests (off by default: SigV2 is weaker, and dated loosely).
    pub sigv2: bool,
    /// Log every request here (a file opened for appending, private).
    pub access_log: Option<std::fs::File>,
    /// Count every request here (`--metrics`, [`crate::metrics`]).
    pub metrics: Option<Arc<crate::metrics::GatewayMetrics>>,
    /// KMS key ids served as names of nasd's own encryption (`--kms-key-id`, [`crate::sse`]).
    pub kms_key_ids: Vec<String>,
    /// Multipart uploads unchanged this long are removed ([`crate::stale`]).
    pub stale_upload_after: Duration,
    /// A day, as lifecycle rules count them ([`crate::lifecycle`]).
    pub lifecycle_day: Duration,
    /// The region the gateway serves (`--region`, [`REGION_DEFAULT`]).
    pub region: String,
}

/// The region a gateway serves unless told otherwise.
pub const REGION_DEFAULT: &str = "us-east-1";

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(String),
}

/// A certificate chain and key for HTTPS.
#[derive(Clone)]
pub struct Tls(Arc<rustls::ServerConfig>);

impl Tls {
    /// From PEM files: the certificate chain, and its private key.
    pub fn from_pem(cert: &Path, key: &Path) -> Result<Tls, ServeError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| ServeError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        let certs = rustls_pemfile::certs(&mut read(cert)?.as_slice())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ServeError::Tls(format!("{}: {e}", cert.display())))?;
        let key = rustls_pemfile::private_key(&mut read(key)?.as_slice())
            .map_err(|e| ServeError::Tls(format!("{}: {e}", key.display())))?
            .ok_or_else(|| ServeError::Tls(format!("{}: no private key", key.display())))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ServeError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| ServeError::Tls(e.to_string()))?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Tls(Arc::new(cfg)))
    }
}

/// Lets the process hold as many descriptors as it may (one per connection).
fn raise_fd_limit() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an initialized struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// The s3s service of the gateway: operations, signature checks with the manager's secrets,
/// the guard every request passes, and the body limits.
fn s3_service(
    access: &Arc<Access>,
    gateway: Gateway,
    options: &Options,
) -> s3s::service::S3Service {
    let sigv2 = options.sigv2;
    let mut b = S3ServiceBuilder::new(gateway);
    b.set_auth(KeyAuth(access.clone()));
    b.set_access(Guard {
        access: access.clone(),
        sigv2,
    });
    let mut cfg = s3s::config::S3Config::default();
    cfg.xml_max_body_size = XML_BODY_BYTES_MAX;
    cfg.post_object_max_file_size = front::POST_OBJECT_BYTES_MAX;
    cfg.form_max_field_size = front::FORM_FIELD_BYTES_MAX;
    cfg.form_max_fields_size = front::FORM_FIELDS_BYTES_MAX;
    cfg.form_max_parts = front::FORM_PARTS_MAX;
    b.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
        cfg,
    ))));
    b.build()
}

/// Stops a task when dropped (the sweepers end with the server).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves S3 on `listener` for the gateway whose client is `access`'s, with buckets under
/// `root`, until `shutdown` completes; then stops accepting and returns (requests in flight
/// finish on their tasks).
pub async fn serve(
    listener: TcpListener,
    access: Arc<Access>,
    root: &str,
    options: Options,
    shutdown: impl Future<Output = ()>,
) {
    raise_fd_limit();
    let staging = format!(
        "{}/{}",
        root.trim_end_matches('/'),
        crate::multipart::STAGING_DIR
    );
    let sweeper = tokio::spawn(crate::stale::sweep_forever(
        access.clone(),
        staging,
        options.stale_upload_after,
    ));
    let _sweeper = AbortOnDrop(sweeper);
    let gateway = Gateway::new(
        access.clone(),
        root,
        options.kms_key_ids.clone(),
        &options.region,
    );
    let _lifecycle = AbortOnDrop(tokio::spawn(crate::lifecycle::sweep_forever(
        gateway.alike(),
        root.to_string(),
        options.lifecycle_day,
    )));
    let preflights = gateway.alike();
    let s3 = s3_service(&access, gateway, &options);
    let front = Arc::new(Front::new(
        s3,
        preflights,
        access,
        options.access_log.map(AccessLog::new),
        options.metrics,
    ));
    let mut http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(HEADER_READ_TIMEOUT_MS))
        .max_buf_size(HEADER_BYTES_MAX)
        .max_headers(HEADERS_MAX);
    http.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_STREAMS_MAX)
        .max_header_list_size(HEADER_BYTES_MAX as u32);
    let http = Arc::new(http);
    let acceptor = options.tls.map(|t| tokio_rustls::TlsAcceptor::from(t.0));
    let conns = Conns::new();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(ACCEPT_PAUSE_MS)).await;
                    continue;
                }
            },
        };
        // Admitted, perhaps in place of an idle connection; refused (closed) only when every
        // connection it could replace is busy.
        let Some(conn) = conns.admit(peer.ip()) else {
            tracing::debug!("refusing a connection from {peer}: all busy");
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (front, http, acceptor) = (front.clone(), http.clone(), acceptor.clone());
        tokio::spawn(async move {
            let handle = conn.handle();
            let service = hyper::service::service_fn(move |req| {
                front.clone().call(req, handle.clone(), peer)
            });
            let served = async {
                match acceptor {
                    None => {
                        http.serve_connection(TokioIo::new(Stalls::new(tcp)), service)
                            .await
                    }
                    Some(a) => match a.accept(tcp).await {
                        Ok(s) => {
                            http.serve_connection(TokioIo::new(Stalls::new(s)), service)
                                .await
                        }
                        Err(e) => Err(e.into()),
                    },
                }
            };
            tokio::select! {
                r = served => if let Err(e) = r {
                    tracing::debug!("connection from {peer}: {e}");
                },
                // Idle for too long (a silent peer, or one between requests), or evicted.
                _ = conn.closed() => {}
            }
        });
    }
}
