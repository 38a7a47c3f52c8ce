//! The HTTP(S) side: one task per connection (HTTP/1.1 or HTTP/2, TLS optional), each
//! request handed to s3s. Hostile peers meet named limits: a request's headers must arrive
//! within [`HEADER_READ_TIMEOUT_MS`] and fit [`HEADER_BYTES_MAX`], XML bodies are bounded,
//! at most [`CONNECTIONS_MAX`] connections are served at once (more wait in the listen
//! queue), and a failed `accept` (out of file descriptors) pauses the loop instead of
//! ending it.

use crate::access::{Access, KeyAuth};
use crate::gateway::Gateway;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use s3s::service::S3ServiceBuilder;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Connections served at once.
pub const CONNECTIONS_MAX: usize = 16_384;
/// How long a client has to send a request's headers (slow clients are cut off).
pub const HEADER_READ_TIMEOUT_MS: u64 = 30_000;
/// Largest request head (request line and headers).
pub const HEADER_BYTES_MAX: usize = 64 << 10;
/// Most headers in one request.
pub const HEADERS_MAX: usize = 128;
/// Largest XML request body (a DeleteObjects of 1,000 keys of 1,024 bytes fits).
pub const XML_BODY_BYTES_MAX: usize = 2 << 20;
/// Pause after a failed `accept`.
const ACCEPT_PAUSE_MS: u64 = 100;

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

/// Serves S3 on `listener` for the gateway `gateway` (whose client is `access`'s) until
/// `shutdown` completes; then stops accepting and returns (requests in flight finish on
/// their tasks).
pub async fn serve(
    listener: TcpListener,
    access: Arc<Access>,
    root: &str,
    tls: Option<Tls>,
    shutdown: impl Future<Output = ()>,
) {
    raise_fd_limit();
    let mut b = S3ServiceBuilder::new(Gateway::new(access.clone(), root));
    b.set_auth(KeyAuth(access));
    let mut cfg = s3s::config::S3Config::default();
    cfg.xml_max_body_size = XML_BODY_BYTES_MAX;
    b.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
        cfg,
    ))));
    let service = b.build();
    let mut http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(HEADER_READ_TIMEOUT_MS))
        .max_buf_size(HEADER_BYTES_MAX)
        .max_headers(HEADERS_MAX);
    http.http2().timer(TokioTimer::new());
    let http = Arc::new(http);
    let acceptor = tls.map(|t| tokio_rustls::TlsAcceptor::from(t.0));
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => return,
            p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
        };
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
        let _ = tcp.set_nodelay(true);
        let (service, http, acceptor) = (service.clone(), http.clone(), acceptor.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let r = match acceptor {
                None => http.serve_connection(TokioIo::new(tcp), service).await,
                Some(a) => {
                    let handshake = tokio::time::timeout(
                        Duration::from_millis(HEADER_READ_TIMEOUT_MS),
                        a.accept(tcp),
                    )
                    .await;
                    match handshake {
                        Ok(Ok(s)) => http.serve_connection(TokioIo::new(s), service).await,
                        Ok(Err(e)) => {
                            tracing::debug!("TLS handshake with {peer}: {e}");
                            return;
                        }
                        Err(_) => return,
                    }
                }
            };
            if let Err(e) = r {
                tracing::debug!("connection from {peer}: {e}");
            }
        });
    }
}
